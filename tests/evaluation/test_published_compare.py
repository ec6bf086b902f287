"""`--compare-published`: a model beside Reasoning Gym's published models, on the items both answered, scored by one
reward (evaluation/published_compare.py). A synthetic table pins the arithmetic (pairing, ranks, intervals, the
unseen split, refusals); the tiny model runs the whole command on two tasks against the committed table."""

import json
from pathlib import Path

import pytest
import yaml

from envs.splits import question_owner
from evaluation.evaluate_model import main
from evaluation.published_compare import NotComparable, compare_published, display_name
from evaluation.published_scores import load, question_hash

SCORING = load()["scoring"]


def questions_of_both_owners(count: int) -> list[str]:
    """`count` distinct questions, the first half owned by the train split, the rest by the others."""
    seen, unseen, k = [], [], 0
    while len(seen) < count // 2 or len(unseen) < count - count // 2:
        question = f"What is {k} + {k + 1}?"
        (seen if question_owner(question) == "train" else unseen).append(question)
        k += 1
    return seen[:count // 2] + unseen[:count - count // 2]


def synthetic(count: int = 40):
    """A published table of two models on two tasks (good: always right; bad: never, one item unanswered; one item
    neither answered, as where Reasoning Gym now draws another question) and an evaluated run right on every other
    item, one of whose questions is not the published one."""
    questions = questions_of_both_owners(2 * count)
    keys = ["arithmetic/sums", "logic/truths"]
    ids = [f"{key}/{pos}" for key in keys for pos in range(count)]
    by_id = dict(zip(ids, questions))
    hashes = {key: [question_hash(by_id[f"{key}/{pos}"]) for pos in range(count)] for key in keys}
    bad = {key: {"accuracy": [0.0] * count} for key in keys}
    good = {key: {"accuracy": [1.0] * count} for key in keys}
    bad["logic/truths"]["accuracy"][0] = None
    good["logic/truths"]["accuracy"][2] = bad["logic/truths"]["accuracy"][2] = None
    data = {"about": "synthetic", "reasoning_gym": "0.0", "scoring": SCORING, "sets": {"easy": {
        "hashes": hashes, "models": {"lab_good": good, "lab_bad": bad}}}}
    run_questions = dict(by_id, **{ids[1]: "a question the published runs never asked"})
    results = {"run": {"model": "/models/mine", "reward": dict(SCORING), "sampling": {
        "temperature": 0.6, "top_p": 0.95, "max_tokens": 64, "n": 1}},
        "item_accuracy": {item: float(k % 2) for k, item in enumerate(ids)}}
    return data, run_questions, results


def test_the_model_is_placed_among_the_published_ones_on_paired_items():
    data, questions, results = synthetic()
    cmp = compare_published(results, questions, data)
    assert (cmp["set"], cmp["headline"], cmp["matched_items"], cmp["not_published"]) == ("easy", "all", 79, 1)
    assert cmp["no_published_answer"] == {"logic/truths": 1}
    overall = cmp["subsets"]["all"]["overall"]
    assert overall["rank"] == 2 and overall["of"] == 3
    good, bad = overall["models"]  # the better published model first
    assert (good["model"], good["items"], good["published"]) == ("lab_good", 78, 1.0)
    assert (bad["model"], bad["items"], bad["published"]) == ("lab_bad", 77, 0.0)  # its unanswered item is not paired
    mine = [results["item_accuracy"][i] for i in questions if i not in ("arithmetic/sums/1", "logic/truths/2")]
    assert good["delta"] == pytest.approx(sum(mine) / 78 - 1.0)
    assert good["verdict"] == "worse (resolved)" and good["ci95"][1] < 0
    assert bad["verdict"] == "better (resolved)" and bad["ci95"][0] > 0
    assert [row["key"] for row in cmp["subsets"]["all"]["categories"]] == ["arithmetic", "logic"]
    # unseen: exactly the items whose question the train split does not own
    unseen = [i for i in questions if i != "arithmetic/sums/1" and question_owner(questions[i]) != "train"]
    assert cmp["subsets"]["unseen"]["items"] == len(unseen) == 40
    assert compare_published(results, questions, data, trained_here=True)["headline"] == "unseen"
    assert display_name("meta-llama_llama-4-scout") == "llama-4-scout"


def test_a_run_scored_otherwise_or_on_other_items_is_refused():
    data, questions, results = synthetic()
    other = dict(results, run=dict(results["run"], reward=dict(SCORING, partial_credit=True)))
    with pytest.raises(NotComparable, match=r"reward.partial_credit: this run True, the published rescoring False"):
        compare_published(other, questions, data)
    with pytest.raises(NotComparable, match=r"none of this run.s questions .* configs/eval/rg_zero_shot_easy.yaml"):
        compare_published(results, {i: "not published" for i in questions}, data)


def two_task_suite(tmp_path: Path) -> Path:
    """The easy set's items of two tasks (their first four), sampled briefly."""
    suite = {"model": {"path": "", "backend": "hf"}, "prompt": {"system_prompt": "default"}, "pass_k": [1],
             "sampling": {"temperature": 0.6, "top_p": 0.95, "max_tokens": 8, "n": 2},
             "suite": {"items": "published", "size": 4, "seed": 45, "categories": {
                 "arithmetic": {"tasks": {"chain_sum": {}}}, "algorithmic": {"tasks": {"letter_counting": {}}}}}}
    path = tmp_path / "two_tasks.yaml"
    path.write_text(yaml.safe_dump(suite))
    return path


def test_compare_published_end_to_end(tiny_model_dir, tmp_path, capsys):
    suite, out = two_task_suite(tmp_path), tmp_path / "run"
    code = main(["--config", str(suite), "--model", str(tiny_model_dir), "--output", str(out), "--compare-published"])
    assert code == 0
    console = capsys.readouterr().out
    assert "beside Reasoning Gym's published models (easy set, all matched items: 8 items" in console
    assert "vs o3-mini" in console and "arithmetic" in console and "algorithmic" in console
    cmp = json.loads((out / "published.json").read_text())
    assert (cmp["set"], cmp["matched_items"], cmp["not_published"]) == ("easy", 8, 0)
    table = load()["sets"]["easy"]["models"]
    for row in cmp["subsets"]["all"]["overall"]["models"]:  # each published model's own rescored numbers
        published = [a for key in ("arithmetic/chain_sum", "algorithmic/letter_counting")
                     for a in table[row["model"]][key]["accuracy"][:4] if a is not None]
        assert row["items"] == len(published) and row["published"] == pytest.approx(sum(published) / len(published))
    assert (out / "published.png").stat().st_size > 10_000 and (out / "published.md").is_file()
    assert "# Beside Reasoning Gym's published models" in (out / "results.md").read_text()
    # trained here: the headline is the items its train split does not own; the rerun generates nothing
    code = main(["--config", str(suite), "--model", str(tiny_model_dir), "--output", str(out), "--compare-published",
                 "--trained-here"])
    assert code == 0
    records = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert len(records) == 16
    unseen = {r["item_id"] for r in records if question_owner(r["question"]) != "train"}
    cmp = json.loads((out / "published.json").read_text())
    assert cmp["headline"] == "unseen" and cmp["subsets"]["unseen"]["items"] == len(unseen)
    assert f"items whose question this project's train split does not own (a model trained here cannot have drawn " \
           f"them): {len(unseen)} items" in capsys.readouterr().out


def test_compare_published_refuses_before_any_model_loads(tmp_path, capsys):
    suite = two_task_suite(tmp_path)
    assert main(["--config", str(suite), "--model", "/nonexistent", "--compare-published",
                 "reward.partial_credit=true"]) == 2
    assert "reward.partial_credit: this run True, the published rescoring False" in capsys.readouterr().err
    assert main(["--config", str(suite), "--model", "/nonexistent", "--compare-published",
                 "suite.items=evaluation"]) == 2
    assert "--compare-published needs Reasoning Gym's published items" in capsys.readouterr().err
