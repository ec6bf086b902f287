"""bench/bench_quickstart_recipe.py: its recipes compose into the quickstart config they claim, and the sweep's
table reads its records (no training)."""

import importlib.util
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    path = REPO / "bench" / "bench_quickstart_recipe.py"
    spec = importlib.util.spec_from_file_location("bench_quickstart_recipe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def cpu_quickstart(overrides: list[str]):
    """The quickstart config as a CPU run composes it: env.on_cpu applied, the command line winning over it."""
    from training.launch.config import compose_config
    from training.launch.hardware import apply_cpu_overrides

    cfg = compose_config("quickstart", overrides)
    apply_cpu_overrides(cfg, {o.split("=", 1)[0] for o in overrides})
    return cfg


def assert_sets(cfg, overrides: list[str], name: str) -> None:
    for key, value in dict(override.split("=", 1) for override in overrides).items():  # a later override wins
        node = OmegaConf.select(cfg, key)
        expected = yaml.safe_load(value)  # as hydra reads it: false, 20, ... ("3e-5" stays a string in YAML 1.1)
        assert node == expected or isinstance(expected, str) and float(node) == float(expected), (name, key, node)


def test_every_recipe_sets_what_it_names_over_the_cpu_quickstart(bench):
    for name, overrides in bench.RECIPES.items():
        assert_sets(cpu_quickstart(overrides), overrides, name)


def test_shipped_is_the_quickstart_and_letters_the_one_before_it(bench):
    """"shipped" adds nothing to configs/quickstart.yaml; "letters" (and the recipes built on it) train the quickstart
    as it was when BENCHMARKS.md's older tables were measured: letter counts in the mix, 4 prompts x 8, 20 steps."""
    from envs.mix import load_mix, mix_path

    assert bench.RECIPES["shipped"] == []
    letters = cpu_quickstart(bench.RECIPES["letters"])
    assert {spec.key for spec in load_mix(mix_path(str(REPO / letters.env.mix))).tasks} == {
        "chain_sum", "basic_arithmetic", "letter_counting"}
    sizes = (letters.data.train_batch_size, letters.actor_rollout_ref.rollout.n, letters.trainer.total_training_steps)
    assert sizes == (4, 8, 20) and letters.actor_rollout_ref.actor.optim.lr == 3e-5
    assert letters.trainer.val_before_train is False and letters.trainer.test_freq <= 0


def test_a_recipe_is_a_name_or_spelled_out(bench):
    assert bench.parse_recipe("lr3x") == ("lr3x", [*bench.LETTERS, *bench.TEN_STEPS])
    assert bench.parse_recipe("mine:data.train_batch_size=8,trainer.total_training_steps=12") == (
        "mine", ["data.train_batch_size=8", "trainer.total_training_steps=12"])
    with pytest.raises(SystemExit, match="not one of"):
        bench.parse_recipe("lr9x")
    with pytest.raises(SystemExit, match="NAME:KEY=VALUE"):
        bench.parse_recipe("mine:data.train_batch_size")


def test_the_table_has_a_row_per_judged_seed(bench):
    row = {"base": 0.278, "trained": 0.394, "paired_delta": 0.115, "ci95": [0.075, 0.155],
           "verdict": "better (resolved)"}
    record = {"recipe": "lr3x", "seed": 0, "train_seconds": 861.4, "judge_seconds": 396.2,
              "rows": {"in_mix": row, "probe": row, "overall": row}}  # written before the beyond-prior verdict
    pool = {"base": 0.383, "trained": 0.453, "paired_delta": 0.070, "ci95": [-0.01, 0.122], "verdict": None}
    later = {**record, "seed": 1, "rows": {**record["rows"], "beyond prior": pool},
             "verdict": "Not resolved beyond an answer prior: held-out greedy accuracy rose ..."}
    lines = bench.table([record, later]).splitlines()
    assert len(lines) == 4
    assert lines[2].startswith("| lr3x | 0 | 861 s | 396 s | 0.278 -> 0.394, +0.115 [+0.075, +0.155] better (resolved)")
    assert lines[2].endswith("| - | - |")
    assert lines[3].endswith("| 0.383 -> 0.453, +0.070 [-0.010, +0.122] not resolved | "
                             "Not resolved beyond an answer prior |")
