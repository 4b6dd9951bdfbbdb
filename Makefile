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

.PHONY: setup reproduce test test-fast pull report lint mlflow-ui bench critical-path gpu-wheels study-docs clean

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -r requirements.txt
	$(BIN)/pip install --no-deps -e .
	touch $@

reproduce: setup           ## install, then run the whole default (tiny) pipeline
	$(BIN)/snakemake --cores all --configfile $(CONFIG)

test: setup                ## install, then run the whole test suite
	$(BIN)/python -m pytest

test-fast: setup           ## the unit tests only (no end-to-end Snakemake/DVC/MLflow runs)
	$(BIN)/python -m pytest -m "not slow"

pull: setup                ## fresh clone: fetch DVC-tracked outputs and mark them up to date
	$(BIN)/brorl pull --configfile $(CONFIG)

STUDY_DOCS ?= docs/results/study/batch_vs_n
study-docs:                ## copy the study's generated summary (results/study/) to $(STUDY_DOCS)
	mkdir -p $(STUDY_DOCS) && cp results/study/summary.md results/study/summary.csv results/study/*.png $(STUDY_DOCS)/
	PYTHONPATH=src $(BIN)/python -m brorl.study.report results/study/summary.md README.md  # its verdict paragraph

report: setup
	$(BIN)/snakemake --report report.html --configfile $(CONFIG)

lint: setup
	$(BIN)/snakemake --lint --configfile $(CONFIG)

mlflow-ui: setup           ## browse the runs at http://127.0.0.1:5000
	$(BIN)/mlflow ui --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1 --port 5000

bench: setup
	$(BIN)/python benchmarks/bench_simulation.py

critical-path: setup       ## the last run's wall time, critical path and time per rule (logs/benchmarks)
	$(BIN)/python benchmarks/critical_path.py $(if $(filter-out config/config.yaml,$(CONFIG)),--configfile $(CONFIG))

# Wheels for benchmarks/gpu_check.py on the one-GPU host (Python 3.12, no network): what it lacks, for cp312
# x86-64, into an ignored folder that travels with the tree (README, "Paper-profile training").
GPU_WHEELS ?= .gpu-wheels
gpu-wheels:                ## download the GPU host's missing wheels (benchmarks/gpu_wheels.txt) into .gpu-wheels/
	rm -rf $(GPU_WHEELS)
	$(PYTHON) -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
		--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
		-d $(GPU_WHEELS) -r benchmarks/gpu_wheels.txt
	du -sh $(GPU_WHEELS)

clean:                     ## remove pipeline outputs and the local MLflow store (not the DVC remote)
	rm -rf results resources/models/sft resources/models/*.dvc .snakemake logs mlflow.db mlartifacts report.html
