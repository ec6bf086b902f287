"""Which held-out suite `python -m training.pipeline` evaluates on (training/report/pipeline.py `held_out_suite`):
--eval-config, else the config's env.eval_suite, else one derived from the training mix, and the console says so."""

from __future__ import annotations

from pathlib import Path

from evaluation.config import load_config
from training.launch.config import compose_config
from training.report.pipeline import held_out_suite

REPO = Path(__file__).resolve().parents[3]


def test_a_config_without_a_suite_is_judged_on_its_own_mix(tmp_path, capsys):
    mix = tmp_path / "my mix.yaml"
    mix.write_text("tasks:\n  chain_sum: {weight: 1.0}\n  letter_counting: {weight: 1.0}\n")
    cfg = compose_config("grpo", [f"env.mix={mix}"])
    assert cfg.env.get("eval_suite") is None  # the generic presets name no suite
    path = held_out_suite(None, str(cfg.env.mix), tmp_path / "run", on_cpu=True)
    assert Path(path) == tmp_path / "run" / "eval" / "suite.yaml"
    line = capsys.readouterr().out.strip()
    assert line.startswith("[pipeline] held-out suite: the config names none (env.eval_suite)")
    assert "300 evaluation-split items of mix my mix, 150 per task" in line and "--eval-config FILE" in line
    suite = load_config(path, ["model.path=MODEL"])  # the evaluator gets --model
    assert [(c.name, [t.key for t in c.tasks]) for c in suite.categories] == [("in_mix", ["chain_sum",
                                                                                         "letter_counting"])]


def test_an_explicit_suite_wins_and_says_nothing(tmp_path, capsys):
    assert held_out_suite("configs/eval/smoke.yaml", "quickstart", tmp_path, on_cpu=True) == "configs/eval/smoke.yaml"
    quickstart = compose_config("quickstart")
    assert held_out_suite(quickstart.env.eval_suite, "quickstart", tmp_path, on_cpu=True) == \
        "configs/eval/quickstart.yaml"
    assert capsys.readouterr().out == "" and not (tmp_path / "eval").exists()
