import os

# Tests never touch the network: the Hugging Face Hub is unreachable by design, telemetry is off.
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"
os.environ["DVC_NO_ANALYTICS"] = "1"
os.environ["MLFLOW_DISABLE_TELEMETRY"] = "true"
os.environ["DO_NOT_TRACK"] = "1"

# The tests call the venv's `snakemake`, `dvc`, `brorl` and `mlflow`; put them on PATH even when pytest
# is run as .venv/bin/pytest without activating the environment.
import sys
from pathlib import Path

os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + os.environ.get("PATH", "")
