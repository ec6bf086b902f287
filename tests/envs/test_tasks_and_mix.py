"""Task names, task configs and mixes are validated when loaded, with errors that say what to change."""

import math
from pathlib import Path

import pytest
import yaml

from envs.mix import load_mix
from envs.tasks import all_tasks, check_task_name, task_category, tasks_in_category, validate_task_config

MIXES = Path(__file__).resolve().parents[2] / "configs" / "mix"


def test_task_catalogue_matches_reasoning_gym():
    tasks = all_tasks()
    assert len(tasks) == 105 and "composite" not in tasks
    assert task_category("chain_sum") == "arithmetic"
    assert "knights_knaves" in tasks_in_category("logic")
    with pytest.raises(ValueError, match="known: .*arithmetic"):
        tasks_in_category("arithmetics")


def test_unknown_task_names_close_matches():
    with pytest.raises(ValueError, match="did you mean 'chain_sum'"):
        check_task_name("chain_sums")
    with pytest.raises(ValueError, match="cannot be used here"):
        check_task_name("composite")


def test_bad_config_key_names_task_and_key():
    with pytest.raises(ValueError, match="task 'chain_sum': unknown config key 'max_term'.*'max_terms'"):
        validate_task_config("chain_sum", {"max_term": 3})
    with pytest.raises(ValueError, match="'seed' is set by the stream"):
        validate_task_config("chain_sum", {"seed": 3})
    with pytest.raises(ValueError, match="task 'chain_sum': invalid config"):
        validate_task_config("chain_sum", {"min_terms": 5, "max_terms": 2})


@pytest.mark.parametrize("weight", [0, -1, math.inf, math.nan, "1", True])
def test_bad_weights_are_refused(weight):
    with pytest.raises(ValueError, match=r"tasks.chain_sum.weight must be a finite number > 0"):
        load_mix({"tasks": {"chain_sum": {"weight": weight}}})


def test_mix_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"tasks": {"chain_sum": {"weight": 1}, "spel_backward": {}}}))
    with pytest.raises(ValueError, match=rf"{path}: tasks.spel_backward: unknown .*'spell_backward'"):
        load_mix(path)
    with pytest.raises(ValueError, match="unknown mix key"):
        load_mix({"tasks": {"chain_sum": {}}, "task": {}})
    with pytest.raises(ValueError, match="both trained on and held out"):
        load_mix({"tasks": {"chain_sum": {}}, "held_out": ["chain_sum"]})
    with pytest.raises(ValueError, match="no Reasoning Gym curriculum"):
        load_mix({"tasks": {"gsm_symbolic": {"level": 0}}})
    with pytest.raises(ValueError, match=r"level must be an integer in 0..4"):
        load_mix({"tasks": {"spell_backward": {"level": 9}}})
    with pytest.raises(ValueError, match="demote_at < promote_at"):
        load_mix({"tasks": {"chain_sum": {}}, "curriculum": {"promote_at": 0.2, "demote_at": 0.5}})


def test_aliases_share_a_task_with_other_configs():
    mix = load_mix({"tasks": {"easy_sum": {"task": "chain_sum", "config": {"max_terms": 2}},
                              "hard_sum": {"task": "chain_sum", "weight": 2, "config": {"min_terms": 5}}}})
    assert [(s.key, s.task, s.weight) for s in mix.tasks] == [("easy_sum", "chain_sum", 1.0), ("hard_sum", "chain_sum", 2.0)]


@pytest.mark.parametrize("path", sorted(MIXES.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_mix_loads(path):
    mix = load_mix(path)
    assert mix.tasks and all(spec.weight > 0 for spec in mix.tasks)
    assert not set(mix.held_out) & {spec.task for spec in mix.tasks}


def test_sampler_section_is_validated_like_the_rest_of_the_mix():
    mix = load_mix({"tasks": {"chain_sum": {}}, "sampler": {"strategy": "learnability", "window": 32, "floor": 0.2}})
    assert (mix.sampler.strategy, mix.sampler.window, mix.sampler.floor, mix.sampler.reweights) == \
        ("learnability", 32, 0.2, True)
    assert load_mix({"tasks": {"chain_sum": {}}}).sampler.strategy == "uniform"
    with pytest.raises(ValueError, match=r"sampler.temperature must be a finite number in \(0.0, inf\)"):
        load_mix({"tasks": {"chain_sum": {}}, "sampler": {"strategy": "learnability", "temperature": -1}})


def test_envs_modules_depend_one_way():
    """tasks <- mix <- curriculum, mix <- sampler; the stream uses both. No module imports one that imports it."""
    import ast

    envs = Path(__file__).resolve().parents[2] / "envs"

    def imports(name: str) -> set[str]:
        tree = ast.parse((envs / f"{name}.py").read_text())
        found = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        found |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        return {m.split(".", 1)[1] for m in found if m.startswith("envs.")}

    assert imports("mix") == {"tasks"}
    assert "mix" in imports("curriculum") and not {"sampler", "stream"} & imports("curriculum")
    assert "mix" in imports("sampler") and not {"curriculum", "stream"} & imports("sampler")
    assert {"curriculum", "sampler", "mix"} <= imports("stream")
    assert not {"mix", "curriculum", "sampler", "stream"} & imports("tasks")
