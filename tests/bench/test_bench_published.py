"""bench/bench_published.py: both models evaluated by the user's command, drawn together, tabulated per category."""

from bench.bench_published import main
from tests.evaluation.test_published_compare import two_task_suite


def test_base_and_trained_are_set_beside_the_published_models(tiny_model_dir, tmp_path, capsys):
    out, figure = tmp_path / "out", tmp_path / "both.png"
    assert main(["--config", str(two_task_suite(tmp_path)), "--base", str(tiny_model_dir), "--trained",
                 str(tiny_model_dir), "--out", str(out), "--figure", str(figure)]) == 0
    printed = capsys.readouterr().out
    assert "easy set, all matched items" in printed and "easy set, items whose question" in printed
    rows = [line for line in printed.splitlines() if line.startswith(("| arithmetic |", "| overall |"))]
    assert len(rows) == 4 and all("of 11" in row for row in rows)
    # one model twice, sampled with one seed: the same answers, so the paired change is exactly nothing
    assert all(row.endswith("| +0.000 | [+0.000, +0.000] | not resolved |") for row in rows), rows
    assert (out / "base" / "published.json").is_file() and (out / "trained" / "published.json").is_file()
    assert figure.stat().st_size > 10_000
