"""Evaluation configs: every shipped suite loads; bad configs fail naming the file and the key."""

from pathlib import Path

import pytest
import yaml

from evaluation.config import ConfigError, config_from_dict, load_config

REPO = Path(__file__).resolve().parents[2]
SUITES = sorted((REPO / "configs" / "eval").glob("*.yaml"))


def base(**extra) -> dict:
    raw = {"model": {"path": "some/model", "backend": "hf"}, "sampling": {"n": 2},
           "suite": {"size": 3, "categories": {"arith": {"tasks": {"chain_sum": {}}}}}}
    raw.update(extra)
    return raw


@pytest.mark.parametrize("path", SUITES, ids=[p.stem for p in SUITES])
def test_every_shipped_suite_loads(path):
    cfg = load_config(str(path), ["model.path=/models/x"])
    assert cfg.categories or cfg.composites
    assert all(1 <= k <= cfg.sampling.n for k in cfg.pass_k)


def test_shipped_suites_cover_intra_and_inter_domain():
    names = {p.stem for p in SUITES}
    assert {"smoke", "heldout_algorithmic", "heldout_algebra", "heldout_arithmetic", "heldout_cognition",
            "heldout_games"} <= names
    cfg = load_config(str(REPO / "configs/eval/inter_geometry.yaml"), ["model.path=x"])
    assert [t.task for t in cfg.categories[0].tasks] == ["advanced_geometry", "simple_geometry"]
    assert (cfg.sampling.temperature, cfg.sampling.top_p, cfg.sampling.max_tokens, cfg.sampling.n) == (0.6, 0.9, 2048, 3)
    assert cfg.categories[0].tasks[0].size == 100 and cfg.categories[0].tasks[0].seed == 42


def test_overrides_apply_before_validation(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(base()))
    cfg = load_config(str(path), ["sampling.n=4", "suite.size=7", "model.backend=openai", "pass_k=[1,4]"])
    assert cfg.sampling.n == 4 and cfg.categories[0].tasks[0].size == 7 and cfg.pass_k == [1, 4]
    with pytest.raises(ConfigError, match=r"s\.yaml.*'pass_k'"):
        load_config(str(path), ["sampling.n=1", "pass_k=[1,4]"])


@pytest.mark.parametrize("raw, match", [
    (base(modle={}), r"unknown key 'modle'; did you mean model"),
    (base(sampling={"temprature": 0.5}), r"'sampling.temprature'; did you mean temperature"),
    (base(sampling={"n": "three"}), r"'sampling.n' must be a number"),
    (base(sampling={"top_p": 1.5}), r"'sampling.top_p'"),
    (base(model={"path": "", "backend": "hf"}), r"'model.path' is empty"),
    (base(model={"path": "x", "backend": "vlm"}), r"'model.backend'.*did you mean vllm"),
    (base(suite={"categories": {"c": {"tasks": {"chain_summ": {}}}}}), r"suite.categories.c.tasks.chain_summ.*chain_sum"),
    (base(suite={"categories": {"c": {"tasks": {"chain_sum": {"config": {"min_term": 2}}}}}}), r"min_terms"),
    (base(suite={"categories": {"c": {"tasks": {"chain_sum": {"seed": -1}}}}}), r"'suite.categories.c.tasks.chain_sum.seed'"),
    (base(suite={"categories": {"geometri": {"all_tasks": True}}}), r"'suite.categories.geometri.all_tasks'.*geometry"),
    (base(suite={"composites": {"m": {"tasks": {"chain_sum": {"weight": 0}}}}}), r"weight' must be > 0"),
    (base(suite={}), r"nothing to evaluate"),
])
def test_bad_configs_name_file_and_key(raw, match):
    with pytest.raises(ConfigError, match=match) as err:
        config_from_dict(raw, source="suite.yaml")
    assert str(err.value).startswith("suite.yaml: ")


def test_missing_file_and_bad_override(tmp_path):
    with pytest.raises(ConfigError, match="no such config file"):
        load_config(str(tmp_path / "nope.yaml"))
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(base()))
    with pytest.raises(ConfigError, match="key=value"):
        load_config(str(path), ["sampling.n"])


def test_all_tasks_expands_category():
    cfg = config_from_dict(base(suite={"size": 2, "categories": {"geometry": {"all_tasks": True, "seed": 5}}}))
    assert [(t.task, t.size, t.seed) for t in cfg.categories[0].tasks] == [
        ("advanced_geometry", 2, 5), ("simple_geometry", 2, 5)]
