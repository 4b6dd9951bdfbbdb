# Two set-up commands (README): `make reproduce` and `make test`. Both create the pinned venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(abspath $(VENV))/bin
CONFIG ?= config/config.yaml

# The pipeline's shell commands call `brorl`, `dvc` and `mlflow` from the venv; nothing phones home.
export PATH := $(BIN):$(PATH)
export DVC_NO_ANALYTICS := 1
export MLFLOW_DISABLE_TELEMETRY := true
export DO_NOT_TRACK := 1

.PHONY: setup reproduce test test-fast pull report lint mlflow-ui bench clean study-docs

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

clean:                     ## remove pipeline outputs and the local MLflow store (not the DVC remote)
	rm -rf results resources/models/sft resources/models/*.dvc .snakemake logs mlflow.db mlartifacts report.html
