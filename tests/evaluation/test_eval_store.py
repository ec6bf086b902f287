"""The generations log: durable appends, no duplicates, a truncated last line is dropped on reopen."""

import json

from evaluation.store import GenerationStore, atomic_write


def test_append_reload_and_skip_duplicates(tmp_path):
    path = tmp_path / "g.jsonl"
    store = GenerationStore(str(path))
    store.append({"item_id": "a", "sample": 0, "x": {1, 2}})
    store.append({"item_id": "a", "sample": 0, "x": "again"})
    store.append({"item_id": "a", "sample": 1})
    store.close()
    again = GenerationStore(str(path))
    assert again.done("a", 0) and again.done("a", 1) and not again.done("b", 0)
    assert len(path.read_text().splitlines()) == 2
    assert again.records[("a", 0)]["x"] == [1, 2]


def test_truncated_last_line_is_cut_and_appends_stay_valid(tmp_path):
    path = tmp_path / "g.jsonl"
    path.write_text(json.dumps({"item_id": "a", "sample": 0}) + "\n" + '{"item_id": "b", "sam')
    store = GenerationStore(str(path))
    assert list(store.records) == [("a", 0)]
    store.append({"item_id": "b", "sample": 0})
    store.close()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [(r["item_id"], r["sample"]) for r in lines] == [("a", 0), ("b", 0)]


def test_atomic_write_replaces(tmp_path):
    path = tmp_path / "sub" / "r.json"
    atomic_write(str(path), "one")
    atomic_write(str(path), "two")
    assert path.read_text() == "two" and [p.name for p in path.parent.iterdir()] == ["r.json"]
