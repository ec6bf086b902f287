"""The verdict sentence and summary.png (training/report/verdict.py) on comparisons shaped as evaluation.compare
writes them."""

from pathlib import Path

from training.report.report import RunData
from training.report.verdict import decided, one_answer_gains, plot_summary, verdict_sentence


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


def test_summary_png_draws_with_and_without_validation(tmp_path):
    def means(accuracy):
        return {"reward": accuracy, "accuracy": accuracy, "answer_rate": 1.0, "samples": 16}

    validation = {0: {"chain_sum": means(0.1), "letter_counting": means(0.2)},
                  10: {"chain_sum": means(0.4), "letter_counting": means(0.3)}}
    for name, data in (("with.png", RunData(run_dir=tmp_path, validation=validation)),
                       ("without.png", RunData(run_dir=tmp_path))):
        path = plot_summary(data, {None: comparison(0.3, 0.36, (0.02, 0.09))}, tmp_path / name)
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in Path(tmp_path).iterdir()) == ["with.png", "without.png"]  # nothing else left
