"""Import a reasoning-gym `training/configs/*.yaml` as a config of ours, with its mix and a report.

    python -m training.import_reference REF.yaml --out-dir DIR [--name NAME] [--force]
    python training/train_grpo.py --config-path DIR --config-name NAME [overrides]

Writes DIR/NAME.yaml (over configs/base/grpo.yaml and verl 0.9.1's ppo_trainer), DIR/NAME.mix.yaml (their datasets
or curricula) and DIR/NAME.import.md (every key of theirs: carried, translated or removed, with the reason). The
imported config goes through the same checks as ours when it runs; nothing is checked twice here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from training.import_reference.reference_keys import Translation, fit_log_prob_micro, translate_reward, translate_verl
from training.launch.config import CONFIG_DIR, VERL_CONFIG_SEARCHPATH, compose_config

OWN_SECTIONS = ("reasoning_gym", "curriculum", "reward", "hydra", "defaults")


class ImportProblem(ValueError):
    """A reference config we cannot import; the message names the file, the key and the fix."""


def translate_datasets(ref: dict, source: str, out: Translation) -> None:
    """`reasoning_gym:` (and `curriculum:`) -> the mix's tasks, curriculum settings and env.system_prompt."""
    rg = ref.get("reasoning_gym") or {}
    for key in rg:
        if key == "dataset_size":
            out.row("reasoning_gym.dataset_size", "removed", "the stream is unlimited: items are generated as "
                                                             "training reads them, none repeats")
        elif key == "developer_prompt":
            out.put("env.system_prompt", rg[key])
            out.row("reasoning_gym.developer_prompt", "translated", "env.system_prompt")
        elif key == "enable_curriculum_learning":
            out.row("reasoning_gym.enable_curriculum_learning", "translated", "mix curriculum.enabled (with "
                                                                              "curriculum.enabled)")
        elif key == "curricula":
            out.row("reasoning_gym.curricula", "translated", "as curriculum.curricula: mix task levels")
        elif key != "datasets":
            out.row(f"reasoning_gym.{key}", "ignored", "no counterpart in our stream")
    curriculum = dict(ref.get("curriculum") or {})
    if "enable_curriculum_learning" in rg:  # their earlier layout: curricula under reasoning_gym
        curriculum.setdefault("enabled", rg["enable_curriculum_learning"])
        curriculum.setdefault("curricula", rg.get("curricula"))
    tasks = {}
    for name, spec in (rg.get("datasets") or {}).items():
        spec = spec or {}
        extra = set(spec) - {"weight", "config"}
        if extra:
            raise ImportProblem(f"{source}: reasoning_gym.datasets.{name}: unknown key(s) {sorted(extra)}; a dataset "
                                f"has 'weight' and 'config'")
        tasks[name] = {"weight": spec.get("weight", 1.0), "config": dict(spec.get("config") or {})}
        out.row(f"reasoning_gym.datasets.{name}", "translated", "mix tasks." + name)
    if "datasets" in rg and not rg["datasets"]:
        out.row("reasoning_gym.datasets", "translated", "empty: the mix's tasks come from curriculum.curricula")
    if curriculum.get("enabled"):
        for name, spec in (curriculum.get("curricula") or {}).items():
            tasks[name] = {**tasks.get(name, {"weight": 1.0}), "level": _level(name, spec or {}, out)}
            if "weight" in (spec or {}):
                tasks[name]["weight"] = spec["weight"]
    if not tasks:
        raise ImportProblem(f"{source}: no tasks: reasoning_gym.datasets is empty and the curriculum is off (or has "
                            f"no curricula); list datasets as NAME: {{weight: 1, config: {{}}}}")
    out.mix["tasks"] = tasks
    _curriculum(curriculum, ref, out)


def _level(name: str, spec: dict, out: Translation) -> int:
    """Their per-attribute levels -> our one level per task (RG's curriculum at that level for every attribute)."""
    levels = dict(spec.get("attribute_levels") or {})
    level = min(levels.values()) if levels else 0
    exact = len(set(levels.values())) <= 1
    out.row(f"curriculum.curricula.{name}.attribute_levels", "translated" if exact else "approximated",
            f"mix tasks.{name}.level: {level}" + ("" if exact else f" (ours moves all attributes together; "
                                                                   f"theirs were {levels})"))
    return level


def _curriculum(curriculum: dict, ref: dict, out: Translation) -> None:
    """Their thresholds and window -> our curriculum settings (or a row saying the curriculum is off)."""
    if not curriculum:
        return
    if not curriculum.get("enabled"):
        out.row("curriculum.*", "ignored", "curriculum.enabled is false: the tasks keep their configs")
        return
    window = int(curriculum.get("last_k", 64))
    steps = int(ref.get("data", {}).get("train_batch_size", 32)) * int(
        ref.get("actor_rollout_ref", {}).get("rollout", {}).get("n", 8))
    out.mix["curriculum"] = {"enabled": True, "window": window,
                             "promote_at": float(curriculum.get("success_threshold", 0.7)),
                             "demote_at": float(curriculum.get("failure_threshold", 0.3)),
                             "min_samples": min(window, steps)}
    for theirs, ours in (("enabled", "enabled"), ("last_k", "window"), ("success_threshold", "promote_at"),
                         ("failure_threshold", "demote_at")):
        if theirs in curriculum:
            out.row(f"curriculum.{theirs}", "translated", f"mix curriculum.{ours}")
    if "schedule" in curriculum:
        out.row("curriculum.schedule.*", "translated", f"levels are checked after every step once min_samples="
                                                       f"{min(window, steps)} scores (one step's) arrived since the "
                                                       f"last move; update_steps has no counterpart")


def translate(ref: dict, source: str) -> Translation:
    """Their whole config -> our config keys, the mix and the report rows."""
    if not isinstance(ref, dict) or not ({"reasoning_gym", "curriculum"} & set(ref)):
        raise ImportProblem(f"{source}: not a reasoning-gym training config (no 'reasoning_gym:' section); for an "
                            f"evaluation YAML use evaluation/evaluate_model.py --config")
    out = Translation()
    translate_datasets(ref, source, out)
    translate_reward(ref, out)
    for key in ("hydra", "defaults"):
        if key in ref:
            out.row(key, "replaced", "our defaults list (/base/grpo over verl 0.9.1's installed ppo_trainer)")
    unknown = set(ref) - set(OWN_SECTIONS) - {"data", "actor_rollout_ref", "algorithm", "trainer", "critic",
                                              "reward_model", "verbose"}
    for key in sorted(unknown):
        out.row(key, "removed", "not a section of verl 0.9.1 or of reasoning-gym's configs")
    base = compose_config("grpo")  # what an imported config gets from /base/grpo (grpo.yaml adds nothing else)
    translate_verl(ref, base, out)
    fit_log_prob_micro(ref, base, out)
    return out


def write_outputs(out: Translation, ref_path: Path, out_dir: Path, name: str) -> dict[str, Path]:
    """DIR/NAME.yaml, DIR/NAME.mix.yaml and DIR/NAME.import.md; returns their paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"config": out_dir / f"{name}.yaml", "mix": out_dir / f"{name}.mix.yaml",
             "report": out_dir / f"{name}.import.md"}
    out.put("env.mix", str(paths["mix"].resolve()))
    head = (f"# Imported from {ref_path} by `python -m training.import_reference` (what changed and why: "
            f"{paths['report'].name}).\n# Run: python training/train_grpo.py --config-path {out_dir} "
            f"--config-name {name}\n")
    config = {"hydra": {"searchpath": [VERL_CONFIG_SEARCHPATH, f"file://{CONFIG_DIR}"]},
              "defaults": ["/base/grpo", "_self_"], **out.config}
    paths["config"].write_text(head + yaml.safe_dump(config, sort_keys=False))
    paths["mix"].write_text(f"# Tasks of {ref_path}, imported by training.import_reference\n"
                            + yaml.safe_dump(out.mix, sort_keys=False))
    rows = "\n".join(f"| `{key}` | {action} | {where} |" for key, action, where in out.rows)
    paths["report"].write_text(f"# Import of {ref_path}\n\nConfig: `{paths['config'].name}`, mix: "
                               f"`{paths['mix'].name}`.\n\n| their key | what happened | where / why |\n"
                               f"| --- | --- | --- |\n{rows}\n")
    return paths


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m training.import_reference", description=__doc__.split("\n\n")[0])
    parser.add_argument("reference", help="a reasoning-gym training config (training/configs/**/*.yaml)")
    parser.add_argument("--out-dir", required=True, help="folder for NAME.yaml, NAME.mix.yaml and NAME.import.md")
    parser.add_argument("--name", help="config name (default: the reference file's stem)")
    parser.add_argument("--force", action="store_true", help="replace files of an earlier import")
    args = parser.parse_args(argv)
    ref_path, out_dir = Path(args.reference), Path(args.out_dir).expanduser().absolute()
    name = args.name or ref_path.stem
    if not ref_path.is_file():
        print(f"error: {ref_path}: no such file", file=sys.stderr)
        return 2
    if (out_dir / f"{name}.yaml").exists() and not args.force:
        print(f"error: {out_dir / (name + '.yaml')} exists; pass --force to replace it or --name for another name",
              file=sys.stderr)
        return 2
    try:
        ref = yaml.safe_load(ref_path.read_text())
        out = translate(ref, str(ref_path))
    except (ImportProblem, yaml.YAMLError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    paths = write_outputs(out, ref_path, out_dir, name)
    counts: dict[str, int] = {}
    for _, action, _ in out.rows:
        counts[action] = counts.get(action, 0) + 1
    print(f"imported {ref_path}: {len(out.rows)} keys ({', '.join(f'{n} {a}' for a, n in counts.items())})")
    for key, action, where in out.rows:
        if action in ("removed", "ignored", "approximated"):
            print(f"  {action} {key}: {where}")
    print(f"wrote {paths['config']}, {paths['mix'].name}, {paths['report'].name}\n"
          f"run: python training/train_grpo.py --config-path {out_dir} --config-name {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
