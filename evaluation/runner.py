"""One evaluation run: suite -> pending requests -> backend -> score + log each result -> metrics -> reports.

Resumable: generations.jsonl is the source of truth. A rerun in the same output folder asks the backend only for the
(item, sample) pairs that have no record yet; run.json pins what the records were produced with (model, sampling,
prompt, suite) and refuses to mix runs that differ.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import time

from evaluation.backends.base import Backend, Completion, GenRequest, build_backend
from evaluation.benchmarks import prepare as prepare_benchmarks
from evaluation.benchmarks import run as run_benchmarks
from evaluation.config import ConfigError, EvalConfig
from evaluation.reward_section import reward_options
from evaluation.metrics import aggregate, item_accuracy, item_questions
from evaluation.store import GenerationStore, atomic_write
from evaluation.suite import SuiteItem, build_suite, group_kinds

log = logging.getLogger(__name__)
GENERATIONS = "generations.jsonl"


def fingerprint(cfg: EvalConfig) -> dict:
    """What records depend on; `n`, pass_k, endpoints and engine sizing may change between resumed runs."""
    sampling = dataclasses.asdict(cfg.sampling)
    sampling.pop("n")
    suite = {"categories": [dataclasses.asdict(c) for c in cfg.categories],
             "composites": [dataclasses.asdict(c) for c in cfg.composites]}
    spec = {"model": cfg.model.path, "sampling": sampling, "system_prompt": cfg.system_prompt, "suite": suite}
    if cfg.reward:  # only when set, so that runs from before the `reward:` section keep their fingerprint
        spec["reward"] = cfg.reward
    if cfg.model.chat_template_kwargs:  # the same: only when set
        spec["chat_template_kwargs"] = cfg.model.chat_template_kwargs
    if cfg.items != "evaluation":  # the same: other items at the same seeds
        spec["items"] = cfg.items
    if cfg.benchmarks:  # the same: lm-eval tasks beside the suite's
        spec["benchmarks"] = dataclasses.asdict(cfg.benchmarks)
    return {"hash": hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16], "spec": spec}


def scoring_options(cfg: EvalConfig) -> dict:
    """The reward options that decide a score (results record them; comparisons refuse runs that differ)."""
    options = dataclasses.asdict(reward_options(cfg))
    for key in ("timeout_s", "isolate", "tokenizer_path", "max_response_chars"):  # how, not what, is scored
        options.pop(key)
    return options


def model_files(path: str) -> dict[str, list[int]] | None:
    """{relative name: [size, mtime_ns]} of every file in a local model folder (a re-export to the same path changes
    them); None for a hub name or a served model, which the path alone names."""
    if not path or not os.path.isdir(path):
        return None
    found = {}
    for root, _, names in os.walk(path):
        for name in names:
            stat = os.stat(os.path.join(root, name))
            found[os.path.relpath(os.path.join(root, name), path)] = [stat.st_size, stat.st_mtime_ns]
    return dict(sorted(found.items()))


# The code that renders prompts, generates and scores: a cached record was produced by these files' contents.
RECORD_CODE = ("envs", "evaluation", "utils/gqa_sdpa.py", "utils/vllm_sampler.py", "utils/chat_templates")
RECORD_LIBRARIES = ("reasoning-gym", "transformers", "torch", "vllm")


def record_code() -> dict:
    """sha256 of RECORD_CODE's files and the versions of the libraries that generate and score."""
    from importlib import metadata

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    digest = hashlib.sha256()
    for entry in RECORD_CODE:
        path = os.path.join(root, entry)
        walked = [(path, [], [""])] if os.path.isfile(path) else sorted(os.walk(path))
        for folder, _, names in walked:
            for name in sorted(n for n in names if not n.endswith(".pyc")):
                file = os.path.join(folder, name) if name else folder
                digest.update(os.path.relpath(file, root).encode() + b"\0")
                with open(file, "rb") as fh:
                    digest.update(fh.read())
    versions = {}
    for name in RECORD_LIBRARIES:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return {"sha256": digest.hexdigest()[:16], "libraries": versions}


def cache_spec(cfg: EvalConfig) -> dict:
    """What an evaluation's results depend on, for a cache that must never serve another's: the suite, sampling and
    prompt (`fingerprint`), samples and pass@k, every scoring option (defaults included), how the model runs (backend,
    dtype), which model, down to its files' sizes and times, and the code and library versions that made the records
    (results are aggregated anew from them on every use)."""
    return {"records": fingerprint(cfg)["spec"], "n": cfg.sampling.n, "pass_k": list(cfg.pass_k),
            "scoring": scoring_options(cfg), "backend": cfg.model.backend, "dtype": cfg.model.dtype,
            "endpoint": cfg.model.base_url if cfg.model.backend == "openai" else None,
            "model_files": model_files(cfg.model.path), "code": record_code()}


def check_run_file(cfg: EvalConfig, out_dir: str) -> None:
    """Write run.json on the first run; on a rerun, refuse a different model / sampling / prompt / suite."""
    path = os.path.join(out_dir, "run.json")
    current = fingerprint(cfg)
    if os.path.exists(path):
        with open(path) as fh:
            previous = json.load(fh)
        if previous.get("hash") != current["hash"]:
            changed = [k for k in current["spec"] if current["spec"][k] != previous.get("spec", {}).get(k)]
            raise ConfigError(f"{cfg.source}: output folder {out_dir} holds generations of a different run "
                              f"(changed: {', '.join(changed) or 'unknown'}); use another --output or delete it")
        return
    atomic_write(path, json.dumps(current, indent=2, sort_keys=True))


def pending_requests(items: list[SuiteItem], store: GenerationStore, n: int) -> list[GenRequest]:
    """One request per item that still misses samples, listing exactly the missing sample indices."""
    requests = []
    for item in items:
        missing = [s for s in range(n) if not store.done(item.item_id, s)]
        if missing:
            requests.append(GenRequest(item.item_id, item.messages, missing))
    return requests


def ask_once_per_prompt(requests: list[GenRequest]) -> dict[str, list[GenRequest]]:
    """Greedy decoding answers a prompt alike each time it is asked, and suites repeat questions where a task has few
    (the quickstart's 650 items ask 403): {first request's key: every request with its prompt and missing samples}."""
    groups: dict[str, list[GenRequest]] = {}
    first: dict[str, str] = {}
    for req in requests:
        prompt = json.dumps([req.messages, req.samples], sort_keys=True)
        groups.setdefault(first.setdefault(prompt, req.key), []).append(req)
    return groups


def score_completions(item: SuiteItem, completions: list[Completion], options) -> list[dict]:
    """Score with the training reward (envs.reward with the suite's reward options), each call isolated in a child
    with a timeout."""
    from envs.isolation import shared_scorer
    from envs.reward import score_truncated

    requests = [{"response": c.text, "entry": item.entry, "task": item.task, "options": options,
                 "config": item.config, "response_length": c.num_tokens, "prompt_opens_think": c.prompt_opens_think}
                for c in completions]
    results = shared_scorer().score_many(requests)
    return [score_truncated(r, c.finish_reason == "length", options) for r, c in zip(results, completions)]


def make_record(item: SuiteItem, sample: int, comp: Completion, scored: dict) -> dict:
    """One generations.jsonl line: the item, the response and its scores."""
    entry = item.entry
    return {
        "item_id": item.item_id, "sample": sample, "group": item.group, "task_key": item.task_key,
        "task": item.task, "question": entry.get("question"), "answer": entry.get("answer"),
        "metadata": entry.get("metadata"), "response": comp.text, "num_tokens": comp.num_tokens,
        "finish_reason": comp.finish_reason, "score": float(scored.get("raw_score", 0.0)),
        "reward": float(scored.get("score", 0.0)),
        "accuracy": float(scored.get("acc", 0.0)), "answer_found": bool(scored.get("answer_found", False)),
        "pred": scored.get("pred"), "format_ok": bool(scored.get("format_ok", False)), "reason": scored.get("reason"),
    }


def _progress(total: int):
    from tqdm import tqdm

    return tqdm(total=total, unit="sample", desc="generations", dynamic_ncols=True, disable=total == 0)


def generate_missing(cfg: EvalConfig, items: list[SuiteItem], store: GenerationStore,
                     backend: Backend | None) -> dict:
    """Ask the backend for every missing sample (greedily: once per distinct prompt); score and log each item's
    results as they arrive."""
    requests = pending_requests(items, store, cfg.sampling.n)
    options = reward_options(cfg)
    by_id = {item.item_id: item for item in items}
    todo = sum(len(r.samples) for r in requests)
    stats = {"requests": len(requests), "samples": todo, "generate_s": 0.0, "tokens": 0}
    if not requests:
        log.info("all %d items x %d samples already in %s", len(items), cfg.sampling.n, store.path)
        return stats
    greedy = cfg.sampling.temperature == 0
    same_prompt = ask_once_per_prompt(requests) if greedy else {r.key: [r] for r in requests}
    asked = [group[0] for group in same_prompt.values()]
    stats["asked"] = len(asked)

    def on_result(asked_req: GenRequest, completions: list[Completion]) -> None:
        stats["tokens"] += sum(comp.num_tokens for comp in completions)  # generated once, however many items ask
        for req in same_prompt[asked_req.key]:
            item = by_id[req.key]
            scored = score_completions(item, completions, options)
            for sample, comp, score in zip(req.samples, completions, scored):
                store.append(make_record(item, sample, comp, score))
            bar.update(len(completions))

    own = backend is None
    backend = backend or build_backend(cfg.model, cfg.sampling)
    bar = _progress(todo)
    start = time.perf_counter()
    try:
        backend.generate(asked, cfg.sampling, on_result)
    finally:
        stats["generate_s"] = time.perf_counter() - start
        bar.close()
        if own:
            backend.close()
    return stats


def run_evaluation(cfg: EvalConfig, out_dir: str, backend: Backend | None = None) -> dict:
    """Evaluate the suite into `out_dir` (resuming what is there); returns the results dict (also results.json)."""
    from evaluation.report import write_reports

    os.makedirs(out_dir, exist_ok=True)
    check_run_file(cfg, out_dir)
    t0 = time.perf_counter()
    items = build_suite(cfg)
    benchmarks = prepare_benchmarks(cfg, out_dir) if cfg.benchmarks else []  # errors before any model loads
    build_s = time.perf_counter() - t0
    store = GenerationStore(os.path.join(out_dir, GENERATIONS))
    try:
        stats = generate_missing(cfg, items, store, backend)
        if benchmarks:
            stats["benchmarks"] = run_benchmarks(cfg, benchmarks, store, out_dir)
    finally:
        store.close()
    keys = [(i.item_id, s) for i in items for s in range(cfg.sampling.n)]
    keys += [(item, 0) for task in benchmarks for item in task.item_ids(cfg.benchmarks.group)]
    records = [store.records[key] for key in keys if key in store.records]
    results = aggregate(records, cfg.pass_k, group_kinds(cfg), cfg.bootstrap_samples)
    results["item_accuracy"] = item_accuracy(records)  # per item: what a paired comparison compares
    results["item_question"] = item_questions(records)  # and the questions it resamples
    gen_s = stats["generate_s"]
    results["run"] = {
        "config": cfg.source, "model": cfg.model.path or cfg.model.base_url, "backend": cfg.model.backend,
        "sampling": dataclasses.asdict(cfg.sampling), "system_prompt": cfg.system_prompt, "pass_k": cfg.pass_k,
        "reward": scoring_options(cfg),
        "items": len(items), "suite_build_s": round(build_s, 3), "generated_samples": stats["samples"],
        "asked_prompts": stats.get("asked", 0),
        "generate_s": round(gen_s, 3), "samples_per_s": round(stats["samples"] / gen_s, 3) if gen_s else None,
        "tokens_per_s": round(stats["tokens"] / gen_s, 1) if gen_s else None,
        "fingerprint": fingerprint(cfg)["hash"], "complete": len(records) == len(keys),
    }
    write_reports(results, out_dir)
    return results
