"""reasoning-gym's `training/evaluations/*.yaml` schema, translated into ours so that such a file runs unchanged.

Their flat file (`model_path`, `max_tokens`, `temperature`, `top_p`, `dtype`, `developer_prompt`, `developer_role`,
`output_dir`, `save_metadata`, `save_full_results`, `eval_repeats`, `categories: [{category, datasets: [{dataset,
size, seed, params}]}]`) becomes our `model` / `sampling` / `prompt` / `suite` sections. What has no meaning here is
kept in `ReferenceEval` and named on the console; what only shapes their result file feeds `--reference-output`.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any

# their key -> (our dotted key or "", what it became); "" = handled by hand below
MAPPED = {
    "model_path": "model.path",
    "max_tokens": "sampling.max_tokens",
    "temperature": "sampling.temperature",
    "top_p": "sampling.top_p",
    "dtype": "model.dtype",
    "developer_prompt": "prompt.system_prompt",
    "eval_repeats": "sampling.n (and pass_k [1, n])",
    "categories": "suite.categories (seed = our evaluation split's seed: questions disjoint from training)",
    "output_dir": "the output folder's root: OUTPUT_DIR/<config stem>/<model name>",
    "developer_role": "the system role of our prompts",
    "save_metadata": "--reference-output: the 'metadata' block",
    "save_full_results": "--reference-output: per-question 'results'",
}
DATASET_KEYS = ("dataset", "size", "seed", "params")


@dataclass
class ReferenceEval:
    """What a reference-schema file said beyond our config: its output root, result-file switches, console notes."""

    output_dir: str = "results"  # their output_dir: root of our folder and of their local_<timestamp>/ layout
    save_metadata: bool = True  # --reference-output writes the 'metadata' block
    save_full_results: bool = True  # --reference-output writes every question's completions
    mapped: list[str] = field(default_factory=list)  # "their_key -> our key" lines
    ignored: list[str] = field(default_factory=list)  # "their_key: why" lines
    header: str = "reasoning-gym eval config, translated:"

    def console_lines(self) -> list[str]:
        """A header, one line per mapped key, one line per ignored key with its reason."""
        return ([self.header] + [f"  {line}" for line in self.mapped]
                + [f"  ignored {line}" for line in self.ignored])


class ReferenceSchemaError(ValueError):
    """A reference-schema file with a key or value we cannot run; the message names file, key and fix."""


def is_reference_config(raw: Any) -> bool:
    """True for reasoning-gym's flat eval schema: no `suite`, and their top-level keys (categories as a list)."""
    if not isinstance(raw, dict) or "suite" in raw:
        return False
    return isinstance(raw.get("categories"), list) or bool({"model_path", "eval_repeats", "developer_prompt"} & set(raw))


def _check_top_keys(raw: dict, source: str) -> None:
    for key in raw:
        if key not in MAPPED:
            close = difflib.get_close_matches(str(key), sorted(MAPPED), n=2)
            hint = f"did you mean {', '.join(close)}?" if close else f"keys of this schema: {', '.join(MAPPED)}"
            raise ReferenceSchemaError(f"{source}: unknown key '{key}' in a reasoning-gym eval config; {hint} "
                                       f"(or write the file in our schema, see configs/eval/smoke.yaml)")


def _dataset(raw: Any, where: str, source: str) -> tuple[str, dict]:
    """One `{dataset, size, seed, params}` entry -> (task name, our task spec)."""
    if not isinstance(raw, dict) or "dataset" not in raw:
        raise ReferenceSchemaError(f"{source}: '{where}' must be a mapping with a 'dataset' name, got {raw!r}")
    for key in raw:
        if key not in DATASET_KEYS:
            raise ReferenceSchemaError(f"{source}: unknown key '{where}.{key}'; a dataset entry has "
                                       f"{', '.join(DATASET_KEYS)}")
    spec: dict = {"task": str(raw["dataset"]), "config": dict(raw.get("params") or {})}
    for key in ("size", "seed"):
        if raw.get(key) is not None:
            spec[key] = raw[key]
    return spec["task"], spec


def categories_section(raw: Any, source: str) -> dict:
    """Their list of categories -> our `suite.categories` mapping; a dataset listed twice gets a `_2` key."""
    if not isinstance(raw, list) or not raw:
        raise ReferenceSchemaError(f"{source}: 'categories' must be a non-empty list of "
                                   f"{{category: NAME, datasets: [{{dataset: TASK, size: N, seed: S}}]}}")
    out: dict = {}
    for index, cat in enumerate(raw):
        where = f"categories[{index}]"
        if not isinstance(cat, dict) or "category" not in cat or not isinstance(cat.get("datasets"), list):
            raise ReferenceSchemaError(f"{source}: '{where}' needs 'category: NAME' and a 'datasets:' list")
        extra = set(cat) - {"category", "datasets"}
        if extra:
            raise ReferenceSchemaError(f"{source}: unknown key '{where}.{sorted(extra)[0]}'; a category has "
                                       f"'category' and 'datasets'")
        name = str(cat["category"])
        if name in out:
            raise ReferenceSchemaError(f"{source}: category '{name}' is listed twice; merge its datasets")
        tasks: dict = {}
        for j, ds in enumerate(cat["datasets"]):
            task, spec = _dataset(ds, f"{where}.datasets[{j}]", source)
            key, n = task, 1
            while key in tasks:
                n += 1
                key = f"{task}_{n}"
            tasks[key] = spec
        out[name] = {"tasks": tasks}
    return out


def translate_reference(raw: dict, source: str) -> tuple[dict, ReferenceEval]:
    """Their eval YAML (a dict) -> (a dict in our schema, the ReferenceEval with what stays outside it)."""
    _check_top_keys(raw, source)
    ref = ReferenceEval()
    ours: dict = {"model": {}, "sampling": {}, "prompt": {}, "suite": {"size": 100, "seed": 42}}
    for key, (section, name) in {"model_path": ("model", "path"), "dtype": ("model", "dtype"),
                                 "max_tokens": ("sampling", "max_tokens"), "temperature": ("sampling", "temperature"),
                                 "top_p": ("sampling", "top_p")}.items():
        if raw.get(key) is not None:
            ours[section][name] = raw[key]
    # their evaluator sends no system message without developer_prompt; "" is "none" here too
    ours["prompt"]["system_prompt"] = raw.get("developer_prompt") or ""
    repeats = raw.get("eval_repeats", 1)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ReferenceSchemaError(f"{source}: 'eval_repeats' must be an integer >= 1, got {repeats!r}")
    ours["sampling"]["n"] = repeats
    ours["pass_k"] = [1, repeats] if repeats > 1 else [1]
    ours["suite"]["categories"] = categories_section(raw.get("categories"), source)
    ref.output_dir = str(raw.get("output_dir") or "results")
    for key in ("save_metadata", "save_full_results"):
        if key in raw:
            setattr(ref, key, bool(raw[key]))
    role = raw.get("developer_role", "system")
    if role != "system" and raw.get("developer_prompt"):
        ref.ignored.append(f"'developer_role: {role}': prompts are rendered as in training, with the system role "
                           f"(a model trained here saw that role)")
    ref.mapped = [f"{key} -> {MAPPED[key]}" for key in raw if key in MAPPED and not
                  (key == "developer_role" and role != "system")]
    specs = [t for c in ours["suite"]["categories"].values() for t in c["tasks"].values()]
    if any("size" not in t or "seed" not in t for t in specs):
        ref.mapped.append("datasets without size/seed -> size 100, seed 42")
    return ours, ref
