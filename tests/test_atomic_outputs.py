"""Every output a `brorl` command writes is atomic (issue 30, item 2): a kill during the write or a full disk never
leaves a truncated output nor destroys the previous good one.

The slow tests run real `brorl` commands (theory-simulate, theory-figure3, theory-sweep, data-blend,
tasks-generate): each once to completion, then ``BRORL_KILLS_PER_COMMAND`` times (default 2) SIGKILLed at a random
moment of its write (a few ms after the first of its outputs, or a temporary beside one, changes), and every output
is checked: the previous good file or a complete new one. The full-disk test needs root (a 1 MiB tmpfs).
Before the fix, `theory-simulate` killed as its CSV appeared left a 0-byte or truncated simulation.csv.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from brorl.atomic import atomic_dir, atomic_open, atomic_path, remove_stale_temps, write_json, write_text

HANG_GUARD_S = 300
TMP_GLOB = ".*.tmp-*"  # brorl.atomic's temporaries (.dvcignore)
SIM = {"vocab_size": 400, "num_correct": 30, "reward_correct": 1.0, "reward_incorrect": -1.0, "seeded": True,
       "base_logit": 0.0, "correct_logit": 3.0, "anchor_logit": 5.0, "anchor_in_correct": False, "temperature": 1.0,
       "lr": 1.0e-3, "weight_decay": 0.0, "betas": [0.9, 0.999], "eps": 1.0e-8, "steps": 150,
       "n_rollouts": [4, 16], "seeds": [0, 1, 2], "threads": 1}
TASKS = {"tasks": ["add", "multiple"], "train_size": 400, "validation_size": 100, "test_size": 100,
         "probe_train_size": 16, "probe_validation_size": 8, "probe_test_size": 8, "seed": 1234}


def _commands(out: Path) -> dict[str, tuple[list[str], list[Path]]]:
    """name -> (argv after `brorl`, the outputs it writes)."""
    theory = out / "theory"
    sim_csv = theory / "simulation.csv"
    rule = ["--profile", "tiny", "--rule"]
    return {
        "theory-simulate": (["theory-simulate", *rule, "theory_simulation", "--config", json.dumps(SIM),
                             "--csv", str(sim_csv)], [sim_csv]),
        "theory-figure3": (["theory-figure3", *rule, "theory_figure3", "--config",
                            json.dumps({"simulation": SIM, "summary_steps": [10, 50, 150]}), "--csv", str(sim_csv),
                            "--figure", str(theory / "figure3.png"), "--summary-md", str(theory / "summary.md"),
                            "--summary-csv", str(theory / "summary.csv")],
                           [theory / "figure3.png", theory / "summary.md", theory / "summary.csv"]),
        "theory-sweep": (["theory-sweep", *rule, "theory_extended_sweep", "--config",
                          json.dumps({"simulation": SIM, "extended_sweep": {"n_min": 4, "n_max": 16, "seeds": [0],
                                                                            "steps": 40}}),
                          "--csv", str(theory / "sweep.csv"), "--md", str(theory / "sweep.md"),
                          "--png", str(theory / "sweep.png")],
                         [theory / "sweep.csv", theory / "sweep.md", theory / "sweep.png"]),
        "data-blend": (["data-blend", *rule, "paper_data_blend", "--config", "{}", "--csv", str(out / "blend.csv"),
                        "--md", str(out / "blend.md")], [out / "blend.csv", out / "blend.md"]),
        "tasks-generate": (["tasks-generate", *rule, "tiny_tasks", "--config", json.dumps(TASKS),
                            "--out", str(out / "data")],
                           [out / "data" / t / f"{s}.jsonl" for t in TASKS["tasks"]
                            for s in ("train", "validation", "test")] + [out / "data" / "tasks.json"]),
    }


def _brorl(argv: list[str], cwd: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "brorl.cli", *argv], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _complete(path: Path, good: Path) -> str | None:
    """Why ``path`` is not a complete output of the kind of ``good`` (a copy of a finished run's), or None."""
    if not path.exists():
        return "missing"
    if path.read_bytes() == good.read_bytes():
        return None
    suffix = path.suffix
    try:
        if suffix == ".csv":
            import pandas as pd

            a, b = pd.read_csv(path), pd.read_csv(good)
            return None if list(a.columns) == list(b.columns) and len(a) == len(b) else f"{len(a)} rows of {len(b)}"
        if suffix == ".png":
            from PIL import Image

            with Image.open(path) as a, Image.open(good) as b:
                a.load()
                return None if a.size == b.size else f"size {a.size} != {b.size}"
        if suffix == ".json":
            json.loads(path.read_text())
            return None
        if suffix in (".jsonl", ".md"):
            a, b = path.read_text().splitlines(), good.read_text().splitlines()
            if suffix == ".jsonl":
                [json.loads(line) for line in a]
            return None if len(a) == len(b) else f"{len(a)} lines of {len(b)}"
    except Exception as err:  # noqa: BLE001 -- any parse error is the finding
        return f"unreadable: {err!r}"[:200]
    return "differs"


def _state(outputs: list[Path]) -> tuple:
    folders = {p.parent for p in outputs}
    stats = []
    for p in outputs:
        try:
            st = p.stat()
            stats.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except FileNotFoundError:
            stats.append(None)
    temps = sorted(str(t) for d in folders if d.is_dir() for t in d.glob(".*tmp*"))
    return tuple(stats), tuple(temps)


@pytest.mark.slow
def test_commands_killed_during_their_write_keep_a_good_output(tmp_path):
    kills = int(os.environ.get("BRORL_KILLS_PER_COMMAND", "2"))
    rng = random.Random(30)
    out, good = tmp_path / "out", tmp_path / "good"
    report = []
    for name, (argv, outputs) in _commands(out).items():
        proc = _brorl(argv, tmp_path)
        log = proc.communicate(timeout=HANG_GUARD_S)[0]
        assert proc.returncode == 0, (name, log)
        copies = {}
        for p in outputs:
            copies[p] = good / p.relative_to(out)
            copies[p].parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(p, copies[p])
        for k in range(kills):
            before = _state(outputs)
            proc = _brorl(argv, tmp_path)
            deadline = time.monotonic() + HANG_GUARD_S
            while _state(outputs) == before and proc.poll() is None:  # until its write starts
                assert time.monotonic() < deadline, f"{name}: no write seen"
                time.sleep(0.0005)
            time.sleep(rng.uniform(0.0, 0.01))
            finished = proc.poll() is not None
            proc.send_signal(signal.SIGKILL)
            proc.communicate(timeout=HANG_GUARD_S)
            broken = {str(p.relative_to(out)): why for p in outputs if (why := _complete(p, copies[p]))}
            assert not broken, f"{name} killed during its write (kill {k}, finished: {finished}) left {broken}"
            report.append(f"{name}: kill {k} {'after the process ended' if finished else 'during the write'}")
        # a later complete run removes what the killed writers left behind
        proc = _brorl(argv, tmp_path)
        log = proc.communicate(timeout=HANG_GUARD_S)[0]
        assert proc.returncode == 0, (name, log)
        left = [t for d in {p.parent for p in outputs} for t in d.glob(TMP_GLOB)]
        assert not left, (name, left)
    print("\n".join(report))
    assert sum("during the write" in r for r in report) >= len(report) // 2, report


def _tmpfs(mnt: Path, size: str) -> None:
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("the full-disk test mounts a small tmpfs: needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mnt)], capture_output=True,
                          text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")


@pytest.mark.slow
def test_full_disk_keeps_the_previous_good_output(tmp_path):
    """`brorl theory-simulate` on a disk too full for its new CSV fails, and the earlier CSV stays whole."""
    mnt = tmp_path / "disk"
    _tmpfs(mnt, "1m")
    try:
        argv, (csv,) = _commands(mnt)["theory-simulate"]
        csv.parent.mkdir(parents=True)
        good = tmp_path / "good.csv"
        big = {**SIM, "steps": 400}  # the same CSV, longer: a new file that no longer fits
        proc = _brorl(["theory-simulate", "--profile", "tiny", "--rule", "theory_simulation", "--config",
                       json.dumps(SIM), "--csv", str(good)], tmp_path)
        assert proc.communicate(timeout=HANG_GUARD_S)[0] is not None and proc.returncode == 0
        shutil.copyfile(good, csv)
        free = shutil.disk_usage(mnt).free
        (mnt / "filler").write_bytes(b"\0" * max(0, free - good.stat().st_size // 2))
        argv = [a if a != json.dumps(SIM) else json.dumps(big) for a in argv]
        proc = _brorl(argv, tmp_path)
        log = proc.communicate(timeout=HANG_GUARD_S)[0]
        assert proc.returncode != 0, log
        assert "No space left on device" in log, log[-2000:]
        assert csv.read_bytes() == good.read_bytes()  # the earlier good CSV, whole
        assert not list(csv.parent.glob(TMP_GLOB))  # the failed temporary removed
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


# ------------------------------------------------------------------ the helper itself (fast, in-process)

def test_atomic_path_replaces_only_on_success(tmp_path):
    target = tmp_path / "a.csv"
    write_text(target, "good\n")
    with pytest.raises(RuntimeError):
        with atomic_open(target) as f:
            f.write("half")
            raise RuntimeError("killed")
    assert target.read_text() == "good\n"
    assert not list(tmp_path.glob(TMP_GLOB))
    with atomic_path(target) as tmp:
        assert tmp.parent == tmp.parent and tmp.suffix == ".csv" and tmp.name.startswith(".a.tmp-")
        tmp.write_text("new\n")
        assert target.read_text() == "good\n"  # not yet
    assert target.read_text() == "new\n"


def test_nothing_written_is_an_error_not_an_empty_output(tmp_path):
    target = tmp_path / "b.json"
    write_json(target, {"x": 1})
    with pytest.raises(FileNotFoundError, match="nothing was written"):
        with atomic_path(target):
            pass
    assert json.loads(target.read_text()) == {"x": 1}


def test_stale_temporaries_of_dead_writers_are_removed(tmp_path):
    target = tmp_path / "c.md"
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stale = tmp_path / f".c.tmp-{dead.stdout.strip()}-abcd.md"
    stale.write_text("half")
    live = tmp_path / f".c.tmp-{os.getppid()}-abcd.md"  # a running process's: kept
    live.write_text("in progress")
    assert remove_stale_temps(target) == [stale]
    assert live.exists() and not stale.exists()


def test_atomic_dir_swaps_a_whole_folder(tmp_path):
    folder = tmp_path / "model"
    with atomic_dir(folder) as tmp:
        (tmp / "config.json").write_text("{}")
    with pytest.raises(RuntimeError):
        with atomic_dir(folder) as tmp:
            (tmp / "half.bin").write_bytes(b"x")
            raise RuntimeError("killed")
    assert sorted(p.name for p in folder.iterdir()) == ["config.json"]
    with atomic_dir(folder) as tmp:
        (tmp / "weights.bin").write_bytes(b"w")
    assert sorted(p.name for p in folder.iterdir()) == ["weights.bin"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
