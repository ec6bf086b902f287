"""Reasoning Gym's own evaluation schema (`eval/yaml/{easy,hard}/*.yaml` in open-thought/reasoning-gym, the configs of
its paper's zero-shot runs), translated into ours so that such a file runs unchanged, on the items it drew.

Their file (`model`, `provider`, `output_dir`, `max_concurrent`, `default_size`, `default_seed`, `system_prompt`,
`system_prompt_id`, `system_role`, `save_metadata`, `save_full_results`, `completions_per_prompt`, `max_tokens`,
`temperature`, `top_p`, `categories: [{category, datasets: [{dataset, size, seed, params}]}]`) becomes our `model` /
`sampling` / `prompt` / `suite` sections with `suite.items: published`: each task's items are Reasoning Gym's own
at its seed, not the project's evaluation split. What has no meaning here is named on the console
(evaluation.reference_config.ReferenceEval's lines), never dropped silently.
"""

from __future__ import annotations

import difflib
from typing import Any

from evaluation.reference_config import ReferenceEval, ReferenceSchemaError, categories_section

# their key -> what it became here
MAPPED = {
    "default_size": "suite.size",
    "default_seed": "suite.seed",
    "categories": "suite.categories, with suite.items: published (Reasoning Gym's own items at each seed)",
    "completions_per_prompt": "sampling.n (and pass_k [1, n])",
    "max_tokens": "sampling.max_tokens",
    "temperature": "sampling.temperature",
    "top_p": "sampling.top_p",
    "system_prompt": "prompt.system_prompt",
    "system_prompt_id": "prompt.system_prompt (a Reasoning Gym SYSTEM_PROMPTS name)",
    "system_role": "the system role of our prompts",
    "max_concurrent": "model.max_concurrency (the openai backend's requests in flight)",
    "output_dir": "the output folder's root: OUTPUT_DIR/<config stem>/<model name>",
    "save_metadata": "--reference-output: the 'metadata' block",
    "save_full_results": "--reference-output: per-question 'results'",
}
# their keys that name where their run went, not what it evaluated
IGNORED = {
    "model": "the model their run asked OpenRouter for; pass --model PATH (or an http URL) for the one to evaluate",
    "provider": "OpenRouter's provider routing",
}
MARKERS = {"default_size", "default_seed", "completions_per_prompt", "system_prompt_id", "max_concurrent", "provider"}
DEFAULTS = {"default_size": 500, "max_tokens": 32768, "temperature": 0.6, "top_p": 0.95}  # their eval_config.py's


def is_rg_eval_config(raw: Any) -> bool:
    """True for Reasoning Gym's eval/yaml schema: no `suite`, categories as a list, and one of its own keys."""
    return (isinstance(raw, dict) and "suite" not in raw and isinstance(raw.get("categories"), list)
            and bool(MARKERS & set(raw)) and "model_path" not in raw)


def translate_rg_eval(raw: dict, source: str) -> tuple[dict, ReferenceEval]:
    """Their eval/yaml (a dict) -> (a dict in our schema, the ReferenceEval with what stays outside it)."""
    for key in raw:
        if key not in MAPPED and key not in IGNORED:
            close = difflib.get_close_matches(str(key), sorted(MAPPED | IGNORED), n=2)
            hint = f"did you mean {', '.join(close)}?" if close else f"keys of this schema: {', '.join(MAPPED)}"
            raise ReferenceSchemaError(f"{source}: unknown key '{key}' in a Reasoning Gym eval/yaml config; {hint}")
    settings = {**DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}
    n = settings.get("completions_per_prompt", 1)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ReferenceSchemaError(f"{source}: 'completions_per_prompt' must be an integer >= 1, got {n!r}")
    # their default seed is None (a random one); published runs set 45, and items must be reproducible here
    if "default_seed" not in settings:
        raise ReferenceSchemaError(f"{source}: 'default_seed' is unset: Reasoning Gym would draw a random seed, and "
                                   f"these items could not be drawn again; set it (its published runs used 45)")
    ours: dict = {
        "model": {}, "pass_k": [1, n] if n > 1 else [1],
        "sampling": {"n": n, **{key: settings[key] for key in ("max_tokens", "temperature", "top_p")}},
        # their get_system_prompt(): the text, else the named prompt, else SYSTEM_PROMPTS["default"]
        "prompt": {"system_prompt": settings.get("system_prompt") or settings.get("system_prompt_id") or "default"},
        "suite": {"size": settings["default_size"], "seed": settings["default_seed"], "items": "published",
                  "categories": categories_section(raw.get("categories"), source)},
    }
    if "max_concurrent" in settings:
        ours["model"]["max_concurrency"] = settings["max_concurrent"]
    ref = ReferenceEval(output_dir=str(settings.get("output_dir") or "results"),
                        save_metadata=bool(settings.get("save_metadata", False)),
                        save_full_results=bool(settings.get("save_full_results", False)))
    role = settings.get("system_role", "system")
    if role != "system":
        ref.ignored.append(f"'system_role: {role}': prompts are rendered as in training, with the system role")
    ref.mapped = [f"{key} -> {MAPPED[key]}" for key in raw if key in MAPPED and not
                  (key == "system_role" and role != "system")]
    ref.mapped += [f"{key} unset -> {value} (Reasoning Gym's default)" for key, value in DEFAULTS.items()
                   if key not in raw]
    ref.ignored += [f"'{key}: {raw[key]}': {IGNORED[key]}" for key in raw if key in IGNORED]
    ref.header = "Reasoning Gym eval/yaml config, translated:"
    return ours, ref
