"""External benchmarks through EleutherAI's lm-evaluation-harness, as rows of the same results as Reasoning Gym's.

lm-eval does the work with its own task files and model classes (HF transformers on a CPU, vLLM on a GPU, an
OpenAI-compatible server); this module loads the suite's tasks before any model (an unknown task, a task file that does
not parse or a data set that cannot be opened is a ConfigError naming the key and the fix), runs the tasks whose
documents have no record yet, and writes one generations.jsonl record per document: item id
`<group>/<task>/<doc id>`, so base and trained runs pair item by item like Reasoning Gym rows. lm-eval's response
cache (OUTPUT/lm_eval_cache/) keeps every answer as it arrives: an interrupted task resumes where it stopped.
"""

from __future__ import annotations

import difflib
import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from evaluation.benchmark_config import BenchmarksConfig, BenchmarkTask
from evaluation.config import ConfigError, EvalConfig, ModelConfig

log = logging.getLogger(__name__)
TASK_DIR = "benchmark_tasks"  # OUTPUT/benchmark_tasks/<key>.yaml: a task file over its local data files
OFFLINE_FIX = ("on a machine without the hub, give its data_files (a local copy in the benchmark's format), or copy "
               "the datasets cache (~/.cache/huggingface/datasets, or $HF_DATASETS_CACHE) of a machine that ran it")


@dataclass
class PreparedTask:
    """One lm-eval task ready to run: its spec in the suite, lm-eval's Task object and its decided filter/metric."""

    spec: BenchmarkTask
    key: str  # task key in results: the spec's key, or a group's leaf task name
    task: object  # lm_eval.api.task.Task
    filter: str
    metric: str
    n_docs: int
    manager: object  # the TaskManager that loaded it (indexing lm-eval's task files again costs ~10 s)

    def item_ids(self, group: str) -> list[str]:
        return [item_id(group, self.key, doc) for doc in range(self.n_docs)]


def item_id(group: str, key: str, doc_id: int) -> str:
    return f"{group}/{key}/{doc_id:05d}"


def check_task_files(folders: list[str], source: str) -> None:
    """Parse every YAML of the include path as lm-eval does (its index skips a file that fails, with a log line)."""
    from lm_eval.tasks._yaml_loader import load_yaml

    for folder in folders:
        for root, _, names in os.walk(folder):
            for name in sorted(n for n in names if n.endswith((".yaml", ".yml"))):
                path = os.path.join(root, name)
                try:
                    load_yaml(path, resolve_func=False, recursive=False)
                except Exception as err:  # noqa: BLE001 - any parse error: name the file
                    raise ConfigError(f"{source}: suite.benchmarks.include_path: {path} does not parse as an lm-eval "
                                      f"task file ({type(err).__name__}: {err}); fix it or move it out") from err


def _local_task_file(spec: BenchmarkTask, yaml_path: str, out_dir: str, where: str) -> str:
    """A task file that includes the registered one and reads its data from spec.data_files (every split it names)."""
    import yaml
    from lm_eval.tasks._yaml_loader import load_yaml

    base = load_yaml(yaml_path, resolve_func=False)
    splits = {base[k] for k in ("test_split", "validation_split", "training_split", "fewshot_split") if base.get(k)}
    files = {s: spec.data_files.get(s, spec.data_files.get("*")) for s in splits}
    missing = sorted(s for s, f in files.items() if f is None)
    if missing:
        raise ConfigError(f"{where}.data_files: {spec.task} reads splits {sorted(splits)}; "
                          f"give a file for {missing} too (or one file for every split)")
    kind = "json" if all(f.endswith((".json", ".jsonl")) for f in files.values()) else "parquet"
    override = {"include": yaml_path, "task": base.get("task", spec.task), "dataset_path": kind,
                "dataset_name": None, "dataset_kwargs": {"data_files": files}}
    path = os.path.join(out_dir, TASK_DIR, f"{spec.key}.yaml")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        yaml.safe_dump(override, fh, sort_keys=False)
    return path


def _choose(options: list[str], wanted: str | None, what: str, where: str) -> str:
    if wanted is None:
        return options[0]
    if wanted not in options:
        raise ConfigError(f"{where}: {what} {wanted!r} is not one of this task's: {', '.join(options)}")
    return wanted


def _prepared(spec: BenchmarkTask, task, key: str, where: str, manager) -> PreparedTask:
    config = task.config
    filters = [f["name"] for f in (config.filter_list or []) if isinstance(f, dict) and "name" in f] or ["none"]
    metrics = [m["metric"] for m in (config.metric_list or []) if isinstance(m, dict)] or ["exact_match"]
    docs = len(list(task.eval_docs))
    return PreparedTask(spec, key, task, _choose(filters, spec.filter, "filter", where),
                        _choose(metrics, spec.metric, "metric", where), min(docs, spec.limit or docs), manager)


@functools.lru_cache(maxsize=4)
def task_manager(include_path: tuple[str, ...]):
    """lm-eval's index of its task files and the suite's (building it reads ~10,000 YAML files: once a process)."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=list(include_path) or None)


def unknown_tasks(bench: BenchmarksConfig) -> list[str]:
    """The suite's task names that lm-eval (with the suite's include path) does not know; no data set is opened."""
    index = task_manager(tuple(bench.include_path)).task_index
    return [spec.task for spec in bench.tasks if spec.task not in index]


def prepare(cfg: EvalConfig, out_dir: str) -> list[PreparedTask]:
    """Load every benchmark task of the suite (and open its data) before any model loads."""
    bench: BenchmarksConfig = cfg.benchmarks
    check_task_files(bench.include_path, cfg.source)
    manager = task_manager(tuple(bench.include_path))
    prepared: list[PreparedTask] = []
    for spec in bench.tasks:
        where = f"{cfg.source}: suite.benchmarks.tasks.{spec.key}"
        entry = manager.task_index.get(spec.task)
        if entry is None:
            close = difflib.get_close_matches(spec.task, manager.all_tasks, n=3)
            raise ConfigError(f"{where}: {spec.task!r} is not an lm-eval task or group"
                              + (f"; did you mean {', '.join(close)}?" if close else "")
                              + " (`lm-eval ls tasks` lists them; your own task files go in suite.benchmarks."
                                "include_path)")
        name = spec.task
        if spec.data_files:
            if entry.yaml_path is None or name in manager.all_groups or name in manager.all_tags:
                raise ConfigError(f"{where}.data_files: {name} is a group or has no task file; name its tasks one "
                                  f"by one, each with its data_files")
            name = _local_task_file(spec, str(entry.yaml_path), out_dir, where)
        try:
            loaded = manager.load([name])["tasks"]
        except Exception as err:  # noqa: BLE001 - lm-eval and datasets raise many kinds: name the task and the fix
            raise ConfigError(f"{where}: lm-eval could not load {spec.task} ({type(err).__name__}: {err}); "
                              + ("check its data_files" if spec.data_files else OFFLINE_FIX)) from err
        for leaf_name, task in loaded.items():
            key = spec.key if len(loaded) == 1 else leaf_name
            prepared.append(_prepared(spec, task, key, where, manager))
    keys = [p.key for p in prepared]
    if len(set(keys)) < len(keys):
        raise ConfigError(f"{cfg.source}: suite.benchmarks: a task is named twice ({sorted(keys)}); rename one")
    return prepared


def build_lm(model: ModelConfig):
    """lm-eval's own model class for the suite's backend: hf (transformers), vllm, or local-chat-completions."""
    from lm_eval.api.registry import get_model

    thinking = bool(model.chat_template_kwargs.get("enable_thinking"))
    common = {"pretrained": model.path, "trust_remote_code": model.trust_remote_code, "dtype": model.dtype,
              "chat_template_args": dict(model.chat_template_kwargs) or None,
              "think_end_token": "</think>" if thinking else None}
    if model.backend == "hf":
        import torch

        args = {**common, "device": "cuda" if torch.cuda.is_available() else "cpu"}
        return get_model("hf").create_from_arg_obj(args, {"batch_size": model.batch_size})
    if model.backend == "vllm":
        args = {**common, "tensor_parallel_size": model.tensor_parallel_size,
                "gpu_memory_utilization": model.gpu_memory_utilization, "max_model_len": model.max_model_len,
                "enforce_eager": model.enforce_eager}
        return get_model("vllm").create_from_arg_obj({k: v for k, v in args.items() if v is not None},
                                                      {"batch_size": "auto"})
    if model.backend == "openai":
        return get_model("local-chat-completions").create_from_arg_obj(
            {"base_url": model.base_url.rstrip("/") + "/chat/completions", "model": model.path,
             "num_concurrent": model.max_concurrency, "max_retries": model.max_retries,
             "timeout": model.request_timeout_s, "tokenizer_backend": None}, {})
    raise ConfigError(f"model.backend {model.backend!r}: benchmarks run through lm-eval's hf, vllm or openai models")


def gen_kwargs(cfg: EvalConfig, spec: BenchmarkTask) -> dict:
    """Over the task file's own: the suite's max tokens, greedy when the suite decodes greedily, then the spec's."""
    out = {"max_gen_toks": cfg.sampling.max_tokens}
    if cfg.sampling.temperature == 0:
        out.update(do_sample=False, temperature=0.0)
    return {**out, **spec.gen_kwargs}


def to_records(task: PreparedTask, group: str, samples: list[dict], tokenizer) -> list[dict]:
    """lm-eval's logged samples of the decided filter -> generations.jsonl records (sample 0: one answer a doc)."""
    records = []
    for sample in samples:
        if sample.get("filter", task.filter) != task.filter or int(sample["doc_id"]) >= task.n_docs:
            continue
        resps = sample.get("resps") or [[""]]
        response = resps[0][0] if isinstance(resps[0], (list, tuple)) and resps[0] else str(resps[0])
        pred = sample.get("filtered_resps")
        pred = pred[0] if isinstance(pred, (list, tuple)) and pred else pred
        doc = sample.get("doc") or {}
        accuracy = float(sample.get(task.metric, 0.0))
        records.append({
            "item_id": item_id(group, task.key, int(sample["doc_id"])), "sample": 0, "group": group,
            "task_key": task.key, "task": f"lm_eval:{task.task.config.task}",
            "question": doc.get("question") or doc.get("problem") or str(sample.get("arguments", ""))[-2000:],
            "answer": sample.get("target"), "metadata": {"filter": task.filter, "metric": task.metric},
            "response": str(response), "num_tokens": len(tokenizer.encode(str(response))) if tokenizer else 0,
            "finish_reason": None, "score": accuracy, "reward": accuracy, "accuracy": accuracy,
            "answer_found": str(pred).strip() not in ("[invalid]", "", "None"), "pred": str(pred), "format_ok": True,
            "reason": None,
        })
    return records


def run(cfg: EvalConfig, prepared: list[PreparedTask], store, out_dir: str) -> dict:
    """Evaluate every prepared task that misses records; append its records to `store`, and lm-eval's own
    aggregates (every filter and metric, with the task config as run) to OUTPUT/benchmarks.json."""
    import json

    from lm_eval import simple_evaluate

    from evaluation.store import atomic_write

    group = cfg.benchmarks.group
    pending = [t for t in prepared if not all(store.done(i, 0) for i in t.item_ids(group))]
    stats = {"tasks": len(pending), "documents": sum(t.n_docs for t in pending)}
    if not pending:
        return stats
    logging.getLogger("lm_eval").setLevel(logging.ERROR)  # its per-call INFO/WARNING lines; ours say what runs
    lm = build_lm(cfg.model)
    tokenizer = getattr(lm, "tokenizer", None)
    summary_path = os.path.join(out_dir, "benchmarks.json")
    summary = json.loads(Path(summary_path).read_text()) if os.path.exists(summary_path) else {}
    for task in pending:
        spec, name = task.spec, task.task.config.task
        kwargs = gen_kwargs(cfg, spec)
        print(f"benchmark {task.key}: lm-eval {name}, {task.n_docs} documents, scored by {task.filter} / "
              f"{task.metric}, {kwargs}", flush=True)
        cache = os.path.join(out_dir, "lm_eval_cache", task.key)
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        result = simple_evaluate(
            model=lm, tasks=[task.task], num_fewshot=spec.num_fewshot, limit=task.n_docs, use_cache=cache,
            apply_chat_template=spec.apply_chat_template, fewshot_as_multiturn=spec.fewshot_as_multiturn,
            gen_kwargs=kwargs, log_samples=True, bootstrap_iters=0, random_seed=cfg.sampling.seed,
            task_manager=task.manager)
        for record in to_records(task, group, result["samples"].get(name, []), tokenizer):
            store.append(record)
        summary[task.key] = {"task": name, "results": result["results"].get(name, {}),
                             "n_shot": result.get("n-shot", {}).get(name), "config": result["configs"].get(name)}
        atomic_write(summary_path, json.dumps(summary, indent=1, default=str))
    return stats
