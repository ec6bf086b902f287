"""The verdict sentence and summary.png (training/report/verdict.py) on comparisons shaped as evaluation.compare
writes them."""

from pathlib import Path

from training.report.pipeline import more_steps_command
from training.report.report import RunData
from training.report.verdict import (decided, heldout_rows, one_answer_gains, plot_summary, summary_title,
                                     training_curves, unresolved_advice, verdict_sentence)


def comparison(base: float, trained: float, ci: tuple[float, float] | None, temperature: float = 0.0) -> dict:
    def row(key):
        return {"key": key, "base": base, "trained": trained, "delta": trained - base, "paired_items": 450,
                "paired_delta": trained - base, "ci95": list(ci) if ci else None, "verdict": "-"}

    return {"labels": ["base", "trained"], "scoring": {"sampling.temperature": temperature},
            "groups": [row("in_mix"), row("probe")], "tasks": [], "overall": row("overall")}


def test_the_sentence_says_what_the_interval_decides():
    assert verdict_sentence({None: comparison(0.30, 0.36, (0.02, 0.09))}).startswith("Training helped: held-out greedy "
                                                                                  "accuracy went from 0.300 to 0.360")
    assert verdict_sentence({None: comparison(0.30, 0.25, (-0.08, -0.01))}).startswith("Training hurt:")
    unresolved = verdict_sentence({None: comparison(0.30, 0.32, (-0.01, 0.05))})
    assert unresolved.startswith("Not resolved:") and "[-0.010, +0.050]" in unresolved and unresolved.count(". ") == 0
    assert verdict_sentence({}).startswith("No held-out comparison")


def with_beyond_prior(cmp: dict, base: float, trained: float, ci: tuple[float, float] | None) -> dict:
    cmp["beyond_prior"] = {"key": "beyond prior", "base": base, "trained": trained, "paired_items": 300,
                           "paired_delta": None if ci is None else trained - base, "ci95": list(ci) if ci else None,
                           "tasks": ["in_mix/chain_sum", "in_mix/basic_arithmetic"] if ci else [],
                           "set_apart": {"in_mix/letter_counting": 0.827}, "max_share": 0.25}
    return cmp


def test_training_helped_only_where_the_tasks_no_answer_carries_improved():
    """Overall resolved better (quickstart seed 0: +0.217) with the letter counts' "1" in it: the sentence decides on
    the pool of tasks no answer repeated can carry, and gives the overall change beside it."""
    gain = comparison(0.278, 0.495, (0.174, 0.260))
    prior = verdict_sentence({None: with_beyond_prior(gain, 0.30, 0.36, (-0.01, 0.13))})
    assert prior.startswith("Not resolved beyond an answer prior: held-out greedy accuracy rose +0.217 [+0.174, "
                            "+0.260] over all 450 items, but on the tasks no answer repeated can carry (in_mix/chain_sum, "
                            "in_mix/basic_arithmetic), greedy accuracy went from 0.300 to 0.360 over 300 items")
    assert "Training helped" not in prior and prior.count(". ") == 0
    helped = verdict_sentence({None: with_beyond_prior(gain, 0.30, 0.37, (0.02, 0.12))})
    assert helped.startswith("Training helped: on the tasks no answer repeated can carry (in_mix/chain_sum, "
                             "in_mix/basic_arithmetic), greedy accuracy went from 0.300 to 0.370")
    assert helped.endswith("a resolved improvement (+0.217 [+0.174, +0.260] over all 450 items).")
    hurt = verdict_sentence({None: with_beyond_prior(gain, 0.30, 0.22, (-0.13, -0.03))})
    assert hurt.startswith("Training hurt: on the tasks")
    flat = verdict_sentence({None: with_beyond_prior(comparison(0.30, 0.31, (-0.02, 0.04)), 0.3, 0.3, (-0.03, 0.03))})
    assert flat.startswith("Not resolved: on the tasks")
    none = verdict_sentence({None: with_beyond_prior(gain, None, None, None)})
    assert none.startswith("Not resolved beyond an answer prior: held-out greedy accuracy went from 0.278 to 0.495")
    assert "no task of this suite has its most common answer right on at most 25%" in none
    unknown = with_beyond_prior(gain, None, None, None)  # results from before the most-common-answer metric
    unknown["beyond_prior"]["set_apart"] = {"in_mix/chain_sum": None}
    assert verdict_sentence({None: unknown}) == verdict_sentence({None: gain})  # decided overall, as before


def test_a_not_resolved_verdict_says_what_it_means_and_what_to_try_next():
    """Issue 80: a quickstart seed not resolved beyond the prior (+0.025 [-0.030, +0.080]) is within noise, not a
    failed run; the console (training/report/pipeline.py) and summary.png's title say so and name more steps."""
    flat = {None: with_beyond_prior(comparison(0.30, 0.31, (-0.02, 0.04)), 0.30, 0.325, (-0.03, 0.08))}
    advice = unresolved_advice(flat, 10)
    assert advice == ("Not resolved means the change beyond the answer prior (+0.025 [-0.030, +0.080]) is within "
                      "noise on these 300 items, not evidence that the run failed or that it helped; to try next, run "
                      "the same command with more steps: trainer.total_training_steps=20 (training resumes from step "
                      "10).")
    assert summary_title(flat, 10) == f"{verdict_sentence(flat)}\n{advice}"
    gain = comparison(0.278, 0.495, (0.174, 0.260))  # overall resolved, beyond the prior not: the same advice
    assert unresolved_advice({None: with_beyond_prior(gain, 0.30, 0.36, (-0.01, 0.13))}, 20).endswith(
        "trainer.total_training_steps=40 (training resumes from step 20).")
    overall = unresolved_advice({None: comparison(0.30, 0.32, (-0.01, 0.05))})  # decided overall; step unknown
    assert overall.startswith("Not resolved means the change (+0.020 [-0.010, +0.050]) is within noise on these 450")
    assert overall.endswith("a larger trainer.total_training_steps (training resumes from its last checkpoint).")
    # a resolved verdict keeps its sentence alone; a suite without prior-free tasks gets no advice (steps won't tell)
    helped = {None: with_beyond_prior(gain, 0.30, 0.37, (0.02, 0.12))}
    assert unresolved_advice(helped, 10) is None and summary_title(helped, 10) == verdict_sentence(helped)
    assert unresolved_advice({None: with_beyond_prior(gain, 0.30, 0.22, (-0.13, -0.03))}, 10) is None
    assert unresolved_advice({None: with_beyond_prior(gain, None, None, None)}, 10) is None
    assert unresolved_advice({}, 10) is None
    # the command to paste: the pipeline's own, the steps replaced (make quickstart's line, one override more)
    argv = ["--config-name", "quickstart", "--checkpoints", "checkpoints/rg-grpo/quickstart", "--run-dir",
            "checkpoints/rg-grpo/quickstart/heldout", "--eval-override", "decoding=[greedy]", "trainer.device=cpu",
            "trainer.total_training_steps=10"]
    command = more_steps_command(argv, 20)
    assert command.endswith(" -m training.pipeline --config-name quickstart --checkpoints "
                            "checkpoints/rg-grpo/quickstart --run-dir checkpoints/rg-grpo/quickstart/heldout "
                            "--eval-override 'decoding=[greedy]' trainer.device=cpu trainer.total_training_steps=20")


def test_a_gain_from_one_repeated_answer_is_named():
    """Quickstart seeds 1 and 3: letter counts 0.000 -> 0.780 / 0.680, answering "1" to 143 / 128 of 150 items,
    where "1" is right on 124 (0.827)."""
    cmp = comparison(0.30, 0.36, (0.02, 0.09))
    task = {"base": 0.0, "trained": 0.68, "common_answer": 0.827, "repeated_answer": 0.853}
    cmp["tasks"] = [{"key": "in_mix/letter_counting", **task},
                    {"key": "in_mix/chain_sum", **task, "common_answer": 0.2},  # answers spread: no caveat
                    {"key": "in_mix/varied", **task, "repeated_answer": 0.47},  # the model's answers vary
                    {"key": "in_mix/products", **task, "base": 0.7},  # fell
                    {"key": "in_mix/old", **task, "repeated_answer": None}]  # a result from before the metric
    lines = one_answer_gains({None: cmp})
    assert lines == ["in_mix/letter_counting went 0.000 -> 0.680 while the trained model gave one answer to 85% of "
                     "its items, and that task's most common answer is right on 83%: the gain may be one answer "
                     "repeated"]
    assert one_answer_gains({}) == []


def test_greedy_decides_when_both_decodings_ran():
    cmps = {"sampled": comparison(0.2, 0.3, (0.05, 0.15), temperature=1.0), "greedy": comparison(0.3, 0.31, (-0.02, 0.04))}
    assert decided(cmps)[0] == "greedy" and verdict_sentence(cmps).startswith("Not resolved: held-out greedy")


def test_the_left_panel_is_validation_where_the_run_validated_else_training_accuracy(tmp_path):
    """The CPU quickstart trains without validation (the held-out comparison is its before and after): its summary
    draws the accuracy of the responses each step trained on, per task and pooled; a validating run keeps its curve."""
    def means(accuracy, samples=8):
        return {"reward": accuracy, "accuracy": accuracy, "answer_rate": 0.0, "samples": samples}

    steps = {1: {"tasks": {"chain_sum": means(0.0), "letter_counting": means(0.5, 24)}, "zero_variance_groups": 0.5},
             2: {"tasks": {"letter_counting": means(0.25, 32)}, "zero_variance_groups": 0.0}}
    title, label, curves = training_curves(RunData(run_dir=tmp_path, steps=steps))
    assert title.startswith("training accuracy") and label == "training accuracy"
    # pooled over the step's 32 responses; a task a step did not draw has no point there
    assert curves == {"all": [(1, 0.375), (2, 0.25)], "chain_sum": [(1, 0.0)], "letter_counting": [(1, 0.5), (2, 0.25)]}
    validation = {0: {"chain_sum": means(0.1)}, 20: {"chain_sum": means(0.4)}}
    title, label, curves = training_curves(RunData(run_dir=tmp_path, steps=steps, validation=validation))
    assert title.startswith("in-training validation") and curves == {"chain_sum": [(0, 0.1), (20, 0.4)]}
    assert training_curves(RunData(run_dir=tmp_path))[2] == {}


def test_summary_png_draws_with_and_without_validation(tmp_path):
    def means(accuracy):
        return {"reward": accuracy, "accuracy": accuracy, "answer_rate": 1.0, "samples": 16}

    validation = {0: {"chain_sum": means(0.1), "letter_counting": means(0.2)},
                  10: {"chain_sum": means(0.4), "letter_counting": means(0.3)}}
    for name, data in (("with.png", RunData(run_dir=tmp_path, validation=validation)),
                       ("without.png", RunData(run_dir=tmp_path))):
        cmp = with_beyond_prior(comparison(0.3, 0.36, (0.02, 0.09)), 0.30, 0.33, (-0.01, 0.07))
        path = plot_summary(data, {None: cmp if name == "with.png" else comparison(0.3, 0.36, (0.02, 0.09))},
                            tmp_path / name, step=10)  # with.png: not resolved, the advice under its title
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["with.png", "without.png"]  # nothing else left


def test_summary_shows_the_pool_beyond_the_prior_first():
    cmp = with_beyond_prior(comparison(0.3, 0.36, (0.02, 0.09)), 0.30, 0.33, (-0.01, 0.07))
    assert [row["key"] for row in heldout_rows(cmp)][0] == "beyond prior"
    assert [row["key"] for row in heldout_rows(comparison(0.3, 0.36, (0.02, 0.09)))][-1] == "overall"
