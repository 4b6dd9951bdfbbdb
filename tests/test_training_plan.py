"""The experiment plan (ProRL stage + arms), its config validation, and the plateau rule."""

import copy

import pytest
import yaml

from brorl.config import PROJECT_ROOT, ConfigError
from brorl.pipeline import validate_config
from brorl.training.arms import plan, prorl_settings, stage_config
from brorl.training.settings import RLSettings

CONFIG = yaml.safe_load((PROJECT_ROOT / "config" / "config.yaml").read_text())


def test_plateau_rule():
    s = RLSettings(plateau_window=2, plateau_delta=0.01, probe_every=5)
    assert not s.plateaued([0.30, 0.35])            # not enough probes
    assert not s.plateaued([0.30, 0.35, 0.40])       # still rising
    assert s.plateaued([0.30, 0.40, 0.405, 0.39])    # best of last 2 (0.405) <= 0.40 + 0.01
    assert not s.plateaued([0.30, 0.40, 0.42, 0.39])  # 0.42 > 0.41
    assert not RLSettings(plateau_window=0).plateaued([0.5] * 10)


def test_plan_equal_budget_and_schedule():
    arms = plan(CONFIG["rl"], seed=3)
    assert list(arms) == ["n16", "n64", "n256", "n512", "schedule"]
    budget = CONFIG["rl"]["arms"]["sample_budget"]
    for name, stages in arms.items():
        settings = [RLSettings.from_dict(st) for st in stages]
        assert sum(s.sample_budget for s in settings) <= budget
        assert all(s.seed == 3 for s in settings)
    assert [RLSettings.from_dict(st).n_rollouts for st in arms["schedule"]] == [16, 64, 256, 512]
    assert RLSettings.from_dict(arms["n512"][0]).prompts_per_step == 1


def test_train_arm_builds_its_arm_once_and_the_arm_yields_settings():
    """`brorl train-arm`'s Arm (arm_plan(rl, prorl=True)[name]): an arm of rl.arms takes the job's seed, the ProRL
    stage keeps its own (it runs once, not per seed); a study arm's stages (stages_arm) take the seed."""
    from brorl.training.arms import ScheduleArm, arm_plan, stages_arm

    rl = {"recipe": {"eta0": 0.1}, "prorl": {"n_rollouts": 4, "prompts_per_step": 2, "seed": 7},
          "arms": {"sample_budget": 64, "batches": [{"n_rollouts": 8, "prompts_per_step": 2},
                                                    {"n_rollouts": 16, "prompts_per_step": 1}], "schedule": [8, 16]}}
    assert list(arm_plan(rl)) == ["n8", "n16", "schedule"]  # what the rules and the tables read: no ProRL stage
    arms = arm_plan(rl, prorl=True)
    assert list(arms) == ["prorl", "n8", "n16", "schedule"]
    assert [(s.n_rollouts, s.seed, s.eta0) for s in arms["prorl"].settings(3)] == [(4, 7, 0.1)]
    assert arms["prorl"].stages_for(3) == [{"eta0": 0.1, "n_rollouts": 4, "prompts_per_step": 2, "seed": 7}]
    assert [(s.n_rollouts, s.seed) for s in arms["schedule"].settings(3)] == [(8, 3), (16, 3)]
    study = stages_arm("x-n16", [{"n_rollouts": 16}, {"n_rollouts": 32}])
    assert isinstance(study, ScheduleArm) and study.n_rollouts == (16, 32)
    assert [(s.n_rollouts, s.seed) for s in study.settings(2)] == [(16, 2), (32, 2)]


def test_stage_config_gives_each_arm_its_plan_and_nothing_else():
    """A rule's params hold stage_config(rl, arm): the same stages, and independent of other arms and seeds."""
    rl = CONFIG["rl"]
    for seed in (0, 7):
        for arm, stages in plan(rl, seed=seed).items():
            assert plan(stage_config(rl, arm), seed=seed)[arm] == stages
    assert prorl_settings(stage_config(rl, "prorl")) == prorl_settings(rl)
    more = copy.deepcopy(rl)
    more["arms"]["seeds"].append(9)
    more["arms"]["batches"].append({"n_rollouts": 128, "prompts_per_step": 4})
    more["arms"]["batches"][3]["prompts_per_step"] = 2  # n512 changes; n16 must not
    assert stage_config(more, "n16") == stage_config(rl, "n16")
    assert stage_config(more, "n512") != stage_config(rl, "n512")
    assert stage_config(more, "prorl") == stage_config(rl, "prorl")


@pytest.mark.parametrize("edit, key", [
    (lambda rl: rl["arms"]["batches"][1].update(n_rollouts=1), "rl.arms.batches[1].n_rollouts"),
    (lambda rl: rl["prorl"].update(n_rollouts=1), "rl.prorl.n_rollouts"),
    (lambda rl: rl["arms"].update(sample_budget=100), "rl.arms.sample_budget"),
    (lambda rl: rl["arms"]["batches"][0].update(mini_batches=5), "rl.arms.batches[0].mini_batches"),
    (lambda rl: rl["recipe"].update(epsilon_low=2.0), "rl.recipe.epsilon_low"),
    (lambda rl: rl["arms"].update(schedule=[16, 32]), "rl.arms.schedule[1]"),
    (lambda rl: rl["recipe"].update(lr_rul="sqrt"), "unknown RL settings"),
])
def test_invalid_rl_settings_name_the_key(edit, key):
    config = copy.deepcopy(CONFIG)
    edit(config["rl"])
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        validate_config(config)
