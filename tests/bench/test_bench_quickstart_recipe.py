"""bench/bench_quickstart_recipe.py: its recipes compose into the quickstart config they claim, and the sweep's
table reads its records (no training)."""

import functools
import importlib.util
from pathlib import Path

import pytest
import yaml
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[2]


@functools.cache
def load_bench():
    path = REPO / "bench" / "bench_quickstart_recipe.py"
    spec = importlib.util.spec_from_file_location("bench_quickstart_recipe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench():
    return load_bench()


def cpu_quickstart(overrides: list[str]):
    """The quickstart config as a CPU run composes it (the bench's own function, which its --also-at reads)."""
    return load_bench().cpu_quickstart(overrides)


def assert_sets(cfg, overrides: list[str], name: str) -> None:
    for key, value in dict(override.split("=", 1) for override in overrides).items():  # a later override wins
        node = OmegaConf.select(cfg, key)
        expected = yaml.safe_load(value)  # as hydra reads it: false, 20, ... ("3e-5" stays a string in YAML 1.1)
        assert node == expected or isinstance(expected, str) and float(node) == float(expected), (name, key, node)


def test_every_recipe_sets_what_it_names_over_the_cpu_quickstart(bench):
    for name, overrides in bench.RECIPES.items():
        assert_sets(cpu_quickstart(overrides), overrides, name)


def test_the_shipped_cpu_quickstart_is_the_recipe_that_helped_on_every_seed(bench):
    """BENCHMARKS.md's every-seed sweep is of "skip10": the quickstart a user runs on a CPU must train that
    recipe, without validation (which does not change training: tests/training/test_train.py,
    test_one_seed_gives_one_run_resumed_or_not_validating_or_not)."""
    shipped = cpu_quickstart([])
    assert_sets(shipped, bench.RECIPES["skip10"], "shipped")
    assert shipped.trainer.val_before_train is False and shipped.trainer.test_freq <= 0
    # the recipes measured when the quickstart trained twenty steps still train twenty
    assert shipped.trainer.total_training_steps == 10
    for name in ("skip32_16x4", "steps20", "arith", "cutzero16x4"):
        assert cpu_quickstart(bench.RECIPES[name]).trainer.total_training_steps == 20, name


def test_the_earlier_recipes_train_the_letters_mix_and_the_arithmetic_ones_the_shipped_mix(bench):
    """LETTERS: the earlier quickstart, its sums and differences configured as the shipped mix's, plus letter
    counts; ARITH: the shipped mix from 8 prompts x 4 samples (the same 32 sequences a step as LETTERS' 4 x 8)."""
    from envs.mix import load_mix, mix_path

    def tasks(cfg) -> dict:
        return {spec.key: spec.config for spec in load_mix(mix_path(str(cfg.env.mix))).tasks}

    shipped = tasks(cpu_quickstart([]))
    assert set(shipped) == {"chain_sum", "basic_arithmetic"}
    for name in ("lr1e-5", "wide", "lr3x", "binary", "steps20", "prompts16", "len96"):
        cfg = cpu_quickstart(bench.RECIPES[name])
        letters = tasks(cfg)
        assert set(letters) == {*shipped, "letter_counting"} and all(letters[k] == shipped[k] for k in shipped), name
        assert cfg.env.reward.truncated == "as_is" and cfg.data.max_response_length in (48, 96), name
    for name in ("arith", "arith30", "cutzero", "cutzero16x4"):
        cfg = cpu_quickstart(bench.RECIPES[name])
        assert tasks(cfg) == shipped and cfg.actor_rollout_ref.rollout.n == 4, name
        assert cfg.actor_rollout_ref.actor.optim.lr == 3e-5 and cfg.data.max_response_length == 48, name
    assert cpu_quickstart(bench.RECIPES["arith"]).env.reward.truncated == "as_is"
    assert cpu_quickstart(bench.RECIPES["cutzero"]).env.reward.truncated == "zero"


def test_a_recipe_is_a_name_or_spelled_out(bench):
    assert bench.parse_recipe("lr3x") == ("lr3x", [*bench.LETTERS, "actor_rollout_ref.actor.optim.lr=3e-5",
                                                   *bench.TEN_STEPS])
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


def test_judging_earlier_steps_saves_there_and_views_the_run_as_stopped_there(bench, tmp_path):
    """`--also-at 10 15` of a 20-step run: it saves every 5 steps (the run's 20 and the steps asked); the judge reads a
    view of the run folder whose latest checkpoint is step 10, without the later checkpoints or held-out folders;
    the time recorded is the launch's to the end of step 10."""
    import json

    assert bench.saving_at(["a=1"], []) == ["a=1"]
    twenty = ["trainer.total_training_steps=20", "trainer.save_freq=20"]
    assert bench.saving_at(twenty, [10, 15]) == [twenty[0], "trainer.save_freq=5"]
    assert bench.saving_at(["trainer.total_training_steps=12"], [8])[-1] == "trainer.save_freq=4"
    with pytest.raises(SystemExit, match=r"--also-at \[10\]: each step must be inside the run's 10 steps"):
        bench.saving_at([], [10])

    run = tmp_path / "seed3"
    for step in (5, 10, 15, 20):
        (run / f"global_step_{step}").mkdir(parents=True)
    (run / "latest_checkpointed_iteration.txt").write_text("20\n")
    (run / "heldout").mkdir()
    (run / "logs").mkdir()
    (run / "scoring.json").write_text("{}")
    events = [{"kind": "ready", "step": 0, "time": 100.0}, {"kind": "step", "step": 9, "time": 400.0},
              {"kind": "step", "step": 10, "time": 431.5}]
    (run / "logs" / "progress.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    view = bench.stopped_at(run, 10)
    assert sorted(p.name for p in view.iterdir()) == ["global_step_10", "global_step_5",
                                                      "latest_checkpointed_iteration.txt", "logs", "scoring.json"]
    assert (view / "latest_checkpointed_iteration.txt").read_text() == "10\n"
    assert (view / "global_step_10").resolve() == run / "global_step_10"
    assert bench.stopped_at(run, 10) == view  # made again (a resumed sweep) without complaint
    assert bench.step_end_seconds(run, 10, launched=31.5) == 400.0
    with pytest.raises(SystemExit, match="no step 11"):
        bench.step_end_seconds(run, 11, launched=0.0)
