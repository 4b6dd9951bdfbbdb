"""The rule files read one plan (brorl.pipeline.Plan) and their own names, and the stages run on declared switches.

Issue 33: no rule file reads a global that another rule file defines (they used to depend on include order: 93 such
references), `rule all` asks the plan for its targets, and a stage runs because `stages:` switches it on, not because
its config section is there.
"""

from __future__ import annotations

import ast
import copy
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from snakemake.parser import parse

from brorl.config import ConfigError, merge_configs
from brorl.config import PROJECT_ROOT
from brorl.pipeline import STAGES, Plan, stage_errors, stages, validate_config

RULE_FILES = sorted((PROJECT_ROOT / "workflow" / "rules").glob("*.smk"))
SHARED = {"common.smk": {"PLAN"}}
"""The one name a rule file may read from another: common.smk's plan."""
SHELL_FIELD = re.compile(r"(?<!\{)\{([A-Za-z_]\w*)")


class _Source:
    def __init__(self, path):
        self.path = str(path)

    def get_path_or_uri(self, secret_free=True):
        return self.path


def compiled(path: Path) -> ast.Module:
    """A .smk file as the Python Snakemake runs (snakemake.parser), parsed."""
    workflow = SimpleNamespace(sourcecache=SimpleNamespace(open=lambda source: open(source.path)))
    code, _ = parse(_Source(path), workflow, {})
    return ast.parse(code)


def _outside_scopes(node: ast.AST):
    """``ast.walk`` that does not enter comprehensions, lambdas or functions (their names are not the file's)."""
    yield node
    for child in ast.iter_child_nodes(node):
        if not isinstance(child, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Lambda,
                                  ast.FunctionDef, ast.AsyncFunctionDef)):
            yield from _outside_scopes(child)


def _top_level_bound(module: ast.Module) -> tuple[set[str], set[str]]:
    """Names a file binds at its top level (outside functions and rules' lambdas): (assigned, imported)."""
    assigned, imported = set(), set()

    def visit(stmts):
        for stmt in stmts:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                imported.update((a.asname or a.name).split(".")[0] for a in stmt.names)
            elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                if not any(isinstance(d, ast.Call) and "workflow" in ast.unparse(d) for d in stmt.decorator_list):
                    assigned.add(stmt.name)  # (a rule's compiled function is Snakemake's, not a global of the file)
            else:
                if not isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
                    for node in _outside_scopes(stmt):
                        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                            assigned.add(node.id)
                        elif isinstance(node, ast.NamedExpr):
                            assigned.add(node.target.id)
                if isinstance(stmt, ast.For):
                    assigned.update(n.id for n in ast.walk(stmt.target) if isinstance(n, ast.Name))
                for field in ("body", "orelse", "finalbody"):
                    visit(getattr(stmt, field, []) or [])
                if isinstance(stmt, (ast.If, ast.While)):
                    assigned.update(n.target.id for n in _outside_scopes(stmt.test) if isinstance(n, ast.NamedExpr))
                for handler in getattr(stmt, "handlers", []) or []:
                    visit(handler.body)

    visit(module.body)
    return assigned, imported


def _reads(module: ast.Module) -> set[str]:
    """Every name a file reads (also inside lambdas and functions, and in shell commands' {fields}, which Snakemake
    formats with the Snakefile's globals), less the names bound anywhere in it."""
    reads, bound = set(), set()
    for node in ast.walk(module):
        if isinstance(node, ast.Name):
            (reads if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.Call) and ast.unparse(node.func) in ("workflow.shellcmd", "shell"):
            for const in ast.walk(node):
                if isinstance(const, ast.Constant) and isinstance(const.value, str):
                    reads.update(SHELL_FIELD.findall(const.value))
    shell_names = {"input", "output", "params", "wildcards", "threads", "resources", "log", "rule", "jobid"}
    return reads - bound - shell_names


def cross_file_reads(files: list[Path], shared: dict[str, set[str]]) -> list[str]:
    """``file: NAME (defined in OTHER)`` for each name a file reads that another file of ``files`` defines at its top
    level (beyond ``shared``), and ``NAME: assigned in A and B`` for a name two files assign."""
    modules = {f.name: compiled(f) for f in files}
    bound = {name: _top_level_bound(m) for name, m in modules.items()}
    problems = []
    owners: dict[str, list[str]] = {}
    for name, (assigned, _) in bound.items():
        for var in assigned:
            owners.setdefault(var, []).append(name)
    problems += [f"{var}: assigned in {' and '.join(sorted(files_))}" for var, files_ in sorted(owners.items())
                 if len(files_) > 1 and not var.startswith("_")]
    for name, module in modules.items():
        own = bound[name][0] | bound[name][1]
        for var in sorted(_reads(module) - own):
            for other in owners.get(var, []):
                if other != name and var not in shared.get(other, set()):
                    problems.append(f"{name}: {var} (defined in {other})")
    return problems


def test_no_rule_file_reads_a_global_of_another():
    assert [f.name for f in RULE_FILES][:1] == ["common.smk"] and len(RULE_FILES) >= 10
    assert cross_file_reads(RULE_FILES + [PROJECT_ROOT / "Snakefile"], SHARED) == []


def test_rule_all_asks_the_plan():
    snakefile = (PROJECT_ROOT / "Snakefile").read_text()
    rule_all = snakefile[snakefile.index("rule all:"):snakefile.index("default_target")]
    assert "PLAN.targets" in rule_all
    assert [line for f in RULE_FILES for line in f.read_text().splitlines() if "+=" in line.split("#")[0]] == []


def test_the_check_finds_a_global_read_across_files(tmp_path):
    """The check above can fail: a file reading another's global (as the rule files did before the plan), directly,
    in a lambda, or in a shell command's field, and a name two files assign."""
    (tmp_path / "common.smk").write_text("PLAN = object()\nHELPER = 1\n")
    (tmp_path / "a.smk").write_text(
        "TARGETS = [PLAN]\nSTART = 2\n\n"
        "rule a:\n    output: 'x'\n    params: p=lambda w: HELPER\n    shell: 'echo {START} {params.p}'\n")
    (tmp_path / "b.smk").write_text("X = TARGETS + [START]\nHELPER = 3\n\n"
                                    "rule b:\n    output: 'y'\n    shell: 'cp {input} {output} {OTHER}'\n")
    problems = cross_file_reads(sorted(tmp_path.glob("*.smk")), SHARED)
    assert "a.smk: HELPER (defined in common.smk)" in problems  # in a lambda
    assert "a.smk: HELPER (defined in b.smk)" in problems
    assert "b.smk: TARGETS (defined in a.smk)" in problems
    assert "b.smk: START (defined in a.smk)" in problems
    assert "HELPER: assigned in b.smk and common.smk" in problems
    assert not any("PLAN" in p for p in problems)
    (tmp_path / "b.smk").write_text("rule b:\n    output: 'y'\n    shell: 'echo {START}'\n")
    assert cross_file_reads(sorted(tmp_path.glob("*.smk")), SHARED) == [
        "a.smk: HELPER (defined in common.smk)", "b.smk: START (defined in a.smk)"]


# ---- the declared stage switches ----

def ci() -> dict:
    return yaml.safe_load((PROJECT_ROOT / "tests/configs/ci.yaml").read_text())


def plan_of(config: dict) -> Plan:
    return Plan(validate_config(config), cores=2)


def test_stage_defaults_match_the_schema():
    schema = yaml.safe_load((PROJECT_ROOT / "workflow/schemas/config.schema.yaml").read_text())
    declared = schema["properties"]["stages"]["properties"]
    assert {name: spec["default"] for name, spec in declared.items()} == STAGES


def test_a_section_without_its_switch_runs_nothing():
    """The sections stay (and are checked); the switches decide."""
    on = plan_of(ci())
    assert on.throughput and on.study and on.throughput_outputs and on.study_outputs
    assert any("/throughput.csv" in t for t in on.targets) and any("/study/summary.md" in t for t in on.targets)
    cfg = ci()
    cfg["stages"].update(throughput=False, study=False)
    assert "throughput" in cfg and "study" in cfg
    off = plan_of(cfg)
    assert not off.throughput and not off.study and off.throughput_outputs == [] and off.study_outputs == []
    assert not any("throughput" in t or "/study/" in t for t in off.targets)
    assert set(off.targets) < set(on.targets)
    cfg["stages"].update(evaluation=False)
    no_eval = plan_of(cfg)
    assert no_eval.eval_outputs == [] and no_eval.table_outputs == [] and no_eval.arm_checkpoints == off.arm_checkpoints


def test_a_switch_on_needs_its_section():
    cfg = ci()
    del cfg["throughput"]
    assert stage_errors(cfg) == ["stages.throughput: true, but the config has no `throughput` section to run it with: "
                                 "add the section or set stages.throughput: false [rule: declared stages]"]
    with pytest.raises(ConfigError, match="stages.throughput: true"):
        validate_config(cfg)
    cfg["stages"]["throughput"] = False
    assert stage_errors(cfg) == []
    cfg = ci()
    cfg["stages"]["train"] = False
    assert [e.split(" (")[0] for e in stage_errors(cfg)] == ["stages.throughput: true needs stages.train: true",
                                                               "stages.study: true needs stages.train: true"]
    cfg = ci()
    cfg["stages"]["study_typo"] = True
    with pytest.raises(ConfigError, match="stages"):
        validate_config(cfg)


def test_an_overlay_declares_its_stage():
    """config/study.yaml switches the study on over the tiny profile, whose own config leaves it off."""
    tiny = yaml.safe_load((PROJECT_ROOT / "config/config.yaml").read_text())
    study = yaml.safe_load((PROJECT_ROOT / "config/study.yaml").read_text())
    assert stages(tiny)["study"] is False and "study" not in tiny
    merged = merge_configs([copy.deepcopy(tiny), study])
    assert stages(merged) == {**STAGES, "throughput": True, "study": True}
