"""torch.profiler over one 256 x 256 bf16 rollout of the prefix tree with the small profile's settings (inverse_cdf,
shared prompt KV) on SmolLM2 (resources/small/models/smollm2); prints the plain rate, then the top operators by
self CPU time. Issue 31, session 9: `python benchmarks/profile_tree_bf16.py`."""
import time, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from brorl.models import sampling
torch.set_num_threads(2)
m = AutoModelForCausalLM.from_pretrained("resources/small/models/smollm2", dtype=torch.bfloat16).eval()
tok = AutoTokenizer.from_pretrained("resources/small/models/smollm2")
prompt = tok("Solve: what is the sum of the first hundred odd numbers? Explain each step carefully and show all work. " * 5)["input_ids"][:129]
kw = dict(eos_id=-1, pad_id=0, seed=1, chunk_samples=1 << 16, draw="inverse_cdf", prompt_kv="shared")
sampling.sample_token_ids_tree(m, [prompt], 256, 16, **kw)  # warm-up
t = time.perf_counter(); sampling.sample_token_ids_tree(m, [prompt], 256, 256, **kw); dt = time.perf_counter() - t
print(f"plain: 256 x 256 in {dt:.1f} s = {256*256/dt:.1f} tokens/s")
from torch.profiler import profile, ProfilerActivity
with profile(activities=[ProfilerActivity.CPU]) as prof:
    sampling.sample_token_ids_tree(m, [prompt], 256, 256, **kw)
print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=18, max_name_column_width=40))
