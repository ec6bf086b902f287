"""Evaluate a model on a YAML suite of Reasoning Gym tasks (vLLM, HF transformers or an OpenAI-compatible server).

    python evaluation/evaluate_model.py --config configs/eval/smoke.yaml --model PATH [--backend hf] [--output DIR] \
        [sampling.n=1 suite.size=10 ...]
    python evaluation/evaluate_model.py --config configs/eval/inter_algebra.yaml --model http://127.0.0.1:8000/v1
    python evaluation/evaluate_model.py --config configs/eval/quickstart.yaml \
        --from-run checkpoints/rg-grpo/quickstart --model PATH [--cache]
    python evaluation/evaluate_model.py --compare BASE_DIR_OR_JSON TRAINED_DIR_OR_JSON --output DIR
    python evaluation/evaluate_model.py --config configs/eval/rg_zero_shot_easy.yaml --model PATH --compare-published \
        [--trained-here]   # beside Reasoning Gym's published models (evaluation/published_compare.py)
    python evaluation/evaluate_model.py --config eval_games_composite.yaml [--reference-output [DIR]]  # reasoning-gym's

A YAML in reasoning-gym's training/evaluations/ schema (model_path, eval_repeats, categories: [{category, datasets}],
...) is recognised and translated (evaluation/reference_config.py); `--reference-output` also writes their result
file, DIR/local_<timestamp>/results.json (DIR defaults to the YAML's output_dir, else the output folder).

--from-run RUN scores and samples as that training run did (its scoring.json: reward options, system prompt,
temperature, top_p, max tokens); key=value words still override. --cache keeps the results under
$RG_GRPO_CACHE/eval/<fingerprint of model, suite, scoring and sampling> and reuses them (a base model is evaluated
once).

Writes generations.jsonl (appended as results arrive; rerunning the same command resumes), results.json, results.md
and results.png into the output folder (default outputs/eval/<config name>/<model name>).
"""

from __future__ import annotations

import os
import sys

# Run as a script, Python puts evaluation/ first on sys.path, where config.py, report.py ... would shadow
# top-level modules of other packages; use the repository root instead.
_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _HERE]
sys.path.insert(0, os.path.dirname(_HERE))

import argparse  # noqa: E402
import logging  # noqa: E402
import re  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from datetime import datetime  # noqa: E402


@dataclass
class Args:
    """Command line (everything else lives in the YAML suite and its key=value overrides)."""

    config: str | None = None  # YAML suite (configs/eval/*.yaml)
    model: str | None = None  # model folder / hub name, or an http(s) URL of an OpenAI-compatible /v1 endpoint
    backend: str | None = None  # vllm | hf | openai (default: the YAML's model.backend; openai for a URL)
    output: str | None = None  # output folder
    overrides: list[str] = field(default_factory=list)  # key=value, e.g. sampling.n=1 suite.size=5
    compare: list[str] | None = None  # BASE TRAINED results (folders or results.json)
    labels: list[str] = field(default_factory=lambda: ["base", "trained"])  # names of the compared runs
    reference_output: str | None = None  # also write reasoning-gym's results layout under this root ("" = default)
    from_run: str | None = None  # training run folder whose scoring.json sets reward, prompt and sampling
    cache: bool = False  # reuse / keep results in the evaluation cache (keyed by model, suite, scoring, sampling)
    category: list[str] | None = None  # evaluate only these categories (reasoning-gym's --category)
    batch_size: int | None = None  # model.batch_size (reasoning-gym's --batch-size)
    device: str | None = None  # cpu | cuda | cuda:N, as CUDA_VISIBLE_DEVICES (reasoning-gym's --device)
    verbose: bool = False  # reasoning-gym's --verbose: accepted; the responses are in generations.jsonl
    compare_published: bool = False  # set the model beside Reasoning Gym's published ones (rg_zero_shot_* suites)
    trained_here: bool = False  # the model was trained with this project: headline the items it cannot have seen


def parse_args(argv: list[str] | None = None) -> Args:
    """argv -> Args; key=value words are overrides."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--config", help="YAML suite, e.g. configs/eval/smoke.yaml")
    p.add_argument("--model", help="model folder / hub name, or http(s)://HOST:PORT/v1 of an OpenAI-compatible server")
    p.add_argument("--backend", help="vllm | hf | openai | package.module:builder (default: the YAML's)")
    p.add_argument("--output", "--output-dir", dest="output",
                   help="output folder; rerunning into the same folder resumes")
    p.add_argument("--reference-output", nargs="?", const="", metavar="DIR",
                   help="also write reasoning-gym's result file DIR/local_<timestamp>/results.json (default DIR: "
                        "the reasoning-gym YAML's output_dir, else the output folder)")
    p.add_argument("--compare", nargs=2, metavar=("BASE", "TRAINED"), help="compare two results (folders or json)")
    p.add_argument("--labels", nargs=2, default=["base", "trained"], help="names of the compared runs")
    p.add_argument("--from-run", metavar="RUN", help="score and sample as this training run did (RUN/scoring.json)")
    p.add_argument("--cache", action="store_true", help="reuse results of the same model, suite, scoring and sampling")
    p.add_argument("--category", action="append", metavar="NAME",
                   help="evaluate only this category of the suite (repeatable; composites are left out)")
    p.add_argument("--batch-size", type=int, metavar="N", help="model.batch_size: prompts per generate() (hf)")
    p.add_argument("--device", help="cpu, cuda or cuda:N: sets CUDA_VISIBLE_DEVICES (cpu: hf backend only)")
    p.add_argument("--verbose", action="store_true",
                   help="accepted for reasoning-gym's command lines; every response is in OUTPUT/generations.jsonl")
    p.add_argument("--compare-published", action="store_true",
                   help="with configs/eval/rg_zero_shot_{easy,hard}.yaml: set the model beside Reasoning Gym's "
                        "published models on the same items, rescored by the same reward (OUTPUT/published.*)")
    p.add_argument("--trained-here", action="store_true",
                   help="with --compare-published: the model was trained with this project, so the headline is the "
                        "items whose question its train split does not own")
    p.add_argument("overrides", nargs="*", help="key=value overrides of the YAML (omegaconf dot paths)")
    ns = p.parse_args(argv)
    if not ns.config and not ns.compare:
        p.error("give --config FILE.yaml (or --compare BASE TRAINED)")
    if ns.device is not None and not re.fullmatch(r"cpu|cuda(:\d+)?", ns.device):
        p.error(f"--device {ns.device!r}: give cpu, cuda or cuda:N")
    if ns.trained_here and not ns.compare_published:
        p.error("--trained-here goes with --compare-published")
    return Args(**vars(ns))


def cli_overrides(args: Args) -> list[str]:
    """--from-run's settings, key=value words, --model / --backend / --output as YAML overrides (later ones win), so
    validation sees the final config."""
    out = []
    if args.from_run:
        from envs.run_scoring import eval_overrides, read_scoring

        out += eval_overrides(read_scoring(args.from_run))
    out += list(args.overrides)
    if args.model:
        if args.model.startswith(("http://", "https://")):
            out += [f"model.base_url={args.model}", "model.path="]
            if not args.backend:
                out.append("model.backend=openai")
        else:
            out.append(f"model.path={args.model}")
    if args.backend:
        out.append(f"model.backend={args.backend}")
    if args.output:
        out.append(f"output_dir={args.output}")
    if args.batch_size is not None:
        out.append(f"model.batch_size={args.batch_size}")
    return out


def apply_device(device: str | None) -> str | None:
    """reasoning-gym's `--device` as CUDA_VISIBLE_DEVICES, set before torch loads; returns the console line."""
    if device is None or device == "cuda":
        return None
    visible = "" if device == "cpu" else device.split(":")[1]
    already = os.environ.get("CUDA_VISIBLE_DEVICES")
    if already is not None and already != visible:
        raise SystemExit(f"error: --device {device} and CUDA_VISIBLE_DEVICES={already} disagree; give one of them")
    os.environ["CUDA_VISIBLE_DEVICES"] = visible
    line = f"--device {device}: CUDA_VISIBLE_DEVICES={visible!r}"
    return line if visible else line + " (no GPU visible: the hf backend runs on the CPU, vllm needs its CPU build)"


def default_output_dir(cfg) -> str:
    """outputs/eval/<config stem>/<model name> (the model's last path component, or the endpoint host); a
    reasoning-gym YAML's output_dir replaces outputs/eval."""
    stem = os.path.splitext(os.path.basename(cfg.source))[0]
    model = cfg.model.path.rstrip("/") or cfg.model.base_url.split("//")[-1].split("/")[0]
    root = cfg.reference.output_dir if cfg.reference else os.path.join("outputs", "eval")
    return os.path.join(root, stem, os.path.basename(model).replace(":", "_") or "model")


def mode_configs(cfg) -> list[tuple[str | None, object]]:
    """(subfolder, config) per evaluation: [(None, cfg)] without `modes`; else OUTPUT/greedy (T=0, one sample) and/or
    OUTPUT/sampled (the suite's sampling)."""
    import dataclasses

    if not cfg.modes:
        return [(None, cfg)]
    greedy = dataclasses.replace(cfg, sampling=dataclasses.replace(cfg.sampling, temperature=0.0, n=1), pass_k=[1])
    return [(mode, greedy if mode == "greedy" else cfg) for mode in cfg.modes]


def evaluate(cfg, out_dir: str, cache: bool, backend=None) -> dict:
    """One evaluation into out_dir; with `cache`, generated in the cache folder of its key and copied. The key hashes
    evaluation.runner.cache_spec (suite, sampling, scoring, backend, the model's files), written beside the results
    as cache_key.json, so that a cached result is one of exactly this evaluation."""
    from evaluation.runner import run_evaluation

    if not cache:
        return run_evaluation(cfg, out_dir, backend)
    import hashlib
    import json
    import shutil

    from evaluation.runner import cache_spec
    from evaluation.store import atomic_write
    from utils.offline_models import default_cache_dir

    spec = json.dumps(cache_spec(cfg), sort_keys=True, indent=1)
    cached = default_cache_dir() / "eval" / hashlib.sha256(spec.encode()).hexdigest()[:16]
    print(f"cache {cached}" + (" (hit)" if (cached / "results.json").is_file() else ""))
    atomic_write(str(cached / "cache_key.json"), spec)
    results = run_evaluation(cfg, str(cached), backend)
    shutil.copytree(cached, out_dir, dirs_exist_ok=True)
    return results


def ensure_hash_seed() -> None:
    """Pin PYTHONHASHSEED=0 (re-exec once): five Reasoning Gym generators change with it, and base vs trained
    runs must see the same questions."""
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.environ["PYTHONHASHSEED"] = "0"
        os.execv(sys.executable, [sys.executable, *sys.argv])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.compare:
        from evaluation.compare import NotComparable, comparison_markdown, summary_lines, write_comparisons

        out = args.output or "outputs/eval/comparison"
        try:
            cmps = write_comparisons(args.compare[0], args.compare[1], out, tuple(args.labels))
        except (NotComparable, FileNotFoundError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        for mode, cmp in cmps.items():
            print(comparison_markdown(cmp))
        print("\n".join(summary_lines(cmps)))
        print(f"wrote {out}" + ("/{" + ",".join(cmps) + "}" if None not in cmps else "")
              + "/comparison.md, comparison.json, comparison.png")
        return 0

    # --- config: YAML + overrides, validated before any model loads
    from evaluation.config import ConfigError, load_config, select_categories

    device_line = apply_device(args.device)
    try:
        cfg = load_config(args.config, cli_overrides(args))
        if args.category:
            cfg = select_categories(cfg, args.category)
        if args.compare_published:
            from evaluation.published_compare import check_config

            check_config(cfg)
    except (ConfigError, FileNotFoundError) as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    if device_line:
        print(device_line)
    if args.verbose:
        print("--verbose: nothing more is printed; every response is in generations.jsonl")
    root = cfg.output_dir or default_output_dir(cfg)
    for line in cfg.reference.console_lines() if cfg.reference else []:
        print(line)
    print(f"model {cfg.model.path or cfg.model.base_url} | backend {cfg.model.backend} | output {root}")
    if cfg.items == "published":
        print("items: Reasoning Gym's published ones (create_dataset(task, seed, size) as its evaluations drew them), "
              "not this project's evaluation split: a model trained here may have seen some of their questions")
    print(f"sampling {cfg.sampling} | system prompt {cfg.system_prompt!r} | reward {cfg.reward or 'tags only'} | "
          f"pass@k {cfg.pass_k}" + (f" | modes {cfg.modes}" if cfg.modes else ""))

    # --- evaluate (resumes from out_dir/generations.jsonl)
    from evaluation.backends.openai import RequestFailed
    from evaluation.report import RESULTS_MD

    complete = True
    for mode, mode_cfg in mode_configs(cfg):
        out_dir = os.path.join(root, mode) if mode else root
        started = datetime.now()
        try:
            results = evaluate(mode_cfg, out_dir, args.cache)
        except ConfigError as err:
            print(f"config error: {err}", file=sys.stderr)
            return 2
        except RequestFailed as err:
            print(f"error: {err}\nfinished generations are saved in {out_dir}; rerun the same command to resume",
                  file=sys.stderr)
            return 1
        with open(os.path.join(out_dir, RESULTS_MD)) as fh:
            print(fh.read())
        print(f"wrote {out_dir}/results.json, results.md, results.png, generations.jsonl")
        if args.reference_output is not None:
            from evaluation.reference_output import write_reference_output

            ref_root = args.reference_output or (cfg.reference.output_dir if cfg.reference else out_dir)
            path = write_reference_output(mode_cfg, out_dir, os.path.join(ref_root, mode) if mode else ref_root,
                                          started, (datetime.now() - started).total_seconds())
            print(f"wrote {path} (reasoning-gym's result layout)")
        if args.compare_published:
            from evaluation.published_compare import NotComparable, summary_lines, write_published_comparison

            try:
                cmp = write_published_comparison(out_dir, args.trained_here)
            except NotComparable as err:
                print(f"error: {err}", file=sys.stderr)
                return 2
            print("\n".join(summary_lines(cmp)))
            print(f"wrote {out_dir}/published.md, published.json, published.png (its tables are in results.md too)")
        complete = complete and results["run"]["complete"]
    return 0 if complete else 1


if __name__ == "__main__":
    ensure_hash_seed()
    sys.exit(main())
