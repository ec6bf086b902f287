"""Benchmark: our FSDP -> HF exporter against verl's merger on the same two-rank checkpoint, in one run.

Builds (or reuses) a random Qwen2 of about 0.5B parameters (Qwen2.5-0.5B's shape), writes a real two-rank FSDP2
checkpoint with verl's FSDPCheckpointManager (bench/make_fsdp_checkpoint.py), then runs each tool as a child process
under /usr/bin/time for its peak RSS and wall time. The disk
floor is the time to read the shard files once plus to write the bf16 output's bytes once. Both outputs are compared
tensor by tensor; results go to stdout as JSON and, with --write-md, into BENCHMARKS.md.

    python bench/bench_export.py [--workdir /tmp/rg-bench-export] [--repeats 3] [--write-md] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
# Qwen2.5-0.5B's shape: hidden 896, 24 layers, MLP 4864, vocab 151936, tied embeddings -> ~0.5B parameters
MODEL_SHAPE = {"hidden_size": 896, "num_layers": 24, "intermediate_size": 4864, "vocab_size": 151936}
SECTION = "## Export: FSDP checkpoint to Hugging Face"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workdir", default="/tmp/rg-bench-export", help="model, checkpoint and outputs go here")
    p.add_argument("--repeats", type=int, default=3, help="runs of each tool (alternating); medians are reported")
    p.add_argument("--write-md", action="store_true", help="write the results into BENCHMARKS.md")
    p.add_argument("--keep", action="store_true", help="keep the model and checkpoint for another run")
    return p.parse_args()


def prepare(workdir: Path) -> Path:
    """The 0.5B model and its two-rank checkpoint (reused when already there); returns the actor folder."""
    from utils.offline_models import build_tiny_model

    model = build_tiny_model(workdir / "model-0.5b", **MODEL_SHAPE)
    ckpt = workdir / "checkpoint"
    actor = ckpt / "global_step_1" / "actor"
    if not (ckpt / "latest_checkpointed_iteration.txt").exists():
        shutil.rmtree(ckpt, ignore_errors=True)
        subprocess.run([sys.executable, str(ROOT / "bench" / "make_fsdp_checkpoint.py"), "--model", str(model),
                        "--out", str(ckpt), "--world-size", "2", "--steps", "0", "--no-optimizer"], check=True)
    return actor


def run_child(cmd: list[str], env: dict, scratch: Path) -> dict:
    """Run `cmd` under /usr/bin/time after a sync (no dirty pages carried over); wall time and peak RSS (MiB).

    /usr/bin/time forks the tool from a small process, so the tool's high-water mark is its own, not ours.
    """
    os.sync()
    report = scratch / "time.txt"
    proc = subprocess.run(["/usr/bin/time", "-o", str(report), "-f", "%e %M %U %S %F", *cmd], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stderr.decode()[-3000:]}")
    wall, rss_kib, user, system, major_faults = report.read_text().split()[-5:]
    report.unlink()
    return {"wall_s": float(wall), "peak_rss_mib": round(int(rss_kib) / 1024, 1),
            "cpu_s": round(float(user) + float(system), 2), "major_faults": int(major_faults)}


def disk_floor(actor: Path, out_bytes: int, scratch: Path) -> dict:
    """Seconds to read every model shard once and to write `out_bytes` once (no fsync, like both tools)."""
    os.sync()
    start, total = time.perf_counter(), 0
    for path in sorted(actor.glob("model_world_size_*_rank_*.pt")):
        with open(path, "rb", buffering=0) as f:
            while chunk := f.read(16 * 2**20):
                total += len(chunk)
    read_s = time.perf_counter() - start
    block = b"\0" * (16 * 2**20)
    os.sync()
    start = time.perf_counter()
    with open(scratch, "wb") as f:
        for _ in range(out_bytes // len(block) + 1):
            f.write(block)
    write_s = time.perf_counter() - start
    scratch.unlink()
    return {"read_s": round(read_s, 2), "write_s": round(write_s, 2), "floor_s": round(read_s + write_s, 2),
            "shard_bytes": total}


def same_weights(a: Path, b: Path) -> bool:
    """Both folders hold the same tensor names, dtypes and bits."""
    import torch
    from safetensors import safe_open

    def tensors(folder: Path) -> dict:
        out = {}
        for path in sorted(folder.glob("*.safetensors")):
            with safe_open(path, framework="pt") as f:
                out.update({k: (path, k) for k in f.keys()})
        return out

    ta, tb = tensors(a), tensors(b)
    if set(ta) != set(tb):
        return False
    for key in ta:
        with safe_open(ta[key][0], framework="pt") as fa, safe_open(tb[key][0], framework="pt") as fb:
            x, y = fa.get_tensor(key), fb.get_tensor(key)
            if x.dtype != y.dtype or not torch.equal(x.view(torch.int16), y.view(torch.int16)):
                return False
    return True


def median_run(runs: list[dict]) -> dict:
    """Per-metric medians over repeated runs."""
    return {k: statistics.median(r[k] for r in runs) for k in runs[0]}


def main() -> None:
    args = parse_args()
    workdir = Path(args.workdir)
    actor = prepare(workdir)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    ours_out, verl_out = workdir / "out-ours", workdir / "out-verl"
    ours = [sys.executable, str(ROOT / "utils" / "load_fsdp_to_hf.py"), str(actor), str(ours_out), "--dtype", "bf16",
            "--force", "--quiet"]
    verl = [sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(actor),
            "--target_dir", str(verl_out)]
    runs: dict[str, list[dict]] = {"ours": [], "verl": []}
    load_before = os.getloadavg()[0]
    for _ in range(args.repeats):
        shutil.rmtree(verl_out, ignore_errors=True)
        runs["verl"].append(run_child(verl, env, workdir))
        runs["ours"].append(run_child(ours, env, workdir))
    baseline = run_child([sys.executable, "-c", "import torch, safetensors, tqdm"], env, workdir)
    out_bytes = sum(p.stat().st_size for p in ours_out.glob("*.safetensors"))
    result = {
        "params": None, "shard_bytes": None, "output_bytes": out_bytes,
        "ours": median_run(runs["ours"]), "verl": median_run(runs["verl"]), "all_runs": runs,
        "load_average": [round(load_before, 2), round(os.getloadavg()[0], 2)], "python_torch_baseline": baseline,
        "disk": disk_floor(actor, out_bytes, workdir / "floor.bin"), "identical": same_weights(ours_out, verl_out),
        "cpus": os.cpu_count(),
    }
    result["shard_bytes"] = result["disk"]["shard_bytes"]
    result["params"] = out_bytes // 2
    result["rss_ratio"] = round(result["ours"]["peak_rss_mib"] / result["verl"]["peak_rss_mib"], 3)
    result["time_ratio"] = round(result["ours"]["wall_s"] / result["verl"]["wall_s"], 3)
    print(json.dumps(result, indent=2))
    if args.write_md:
        write_markdown(result, args)
    if not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        shutil.rmtree(ours_out, ignore_errors=True)
        shutil.rmtree(verl_out, ignore_errors=True)


def runs_text(runs: list[dict]) -> str:
    return ", ".join(f"{x['wall_s']:g} / {x['cpu_s']:g} / {x['peak_rss_mib']:g}" for x in runs)


def write_markdown(r: dict, args: argparse.Namespace) -> None:
    """Replace (or add) this benchmark's section of BENCHMARKS.md, leaving the other sections alone."""
    o, v, d, b = r["ours"], r["verl"], r["disk"], r["python_torch_baseline"]
    lines = [
        SECTION, "",
        f"Two-rank FSDP2 checkpoint written by verl's FSDPCheckpointManager (torchrun, gloo, CPU) of a random "
        f"Qwen2 with Qwen2.5-0.5B's shape ({r['params'] / 1e6:.0f}M parameters, fp32 shards "
        f"{r['shard_bytes'] / 1e9:.2f} GB), exported to bf16 safetensors ({r['output_bytes'] / 1e9:.2f} GB). "
        f"Both tools ran as child processes in the same run on {r['cpus']} CPU cores; peak RSS is the maximum "
        f"resident set size reported by `/usr/bin/time`; `sync` runs before each tool so neither pays for the "
        f"other's dirty pages. Neither tool calls fsync.", "",
        "| tool | wall time (s) | CPU user+sys (s) | peak RSS (MiB) | major page faults |", "|---|---|---|---|---|",
        f"| `utils/load_fsdp_to_hf.py --dtype bf16` | {o['wall_s']} | {o['cpu_s']} | {o['peak_rss_mib']} | "
        f"{o['major_faults']} |",
        f"| `python -m verl.model_merger merge --backend fsdp` | {v['wall_s']} | {v['cpu_s']} | "
        f"{v['peak_rss_mib']} | {v['major_faults']} |",
        f"| disk floor: read the shards once + write the output once | {d['floor_s']} "
        f"(read {d['read_s']}, write {d['write_s']}) | - | - | - |",
        f"| `python -c 'import torch, safetensors, tqdm'` (interpreter baseline) | {b['wall_s']} | {b['cpu_s']} | "
        f"{b['peak_rss_mib']} | - |", "",
        f"Ratios of medians (ours / verl): peak RSS {r['rss_ratio']}, wall time {r['time_ratio']}. "
        f"Outputs bit-identical: {r['identical']}. Medians of {args.repeats} alternating run(s) each; all runs "
        f"(wall s / CPU s / MiB): ours {runs_text(r['all_runs']['ours'])}; verl {runs_text(r['all_runs']['verl'])}. "
        f"The machine is shared (1-min load average {r['load_average'][0]} before, {r['load_average'][1]} after), "
        f"so wall times are noisy; CPU time is the steadier measure. The 2 GB of shards fit in the page cache "
        f"(24 GiB RAM), so the read floor is close to memory speed.", "",
        "Command:", "", "```", "python bench/bench_export.py --write-md" +
        (f" --repeats {args.repeats}" if args.repeats != 3 else ""), "```", "",
    ]
    path = ROOT / "BENCHMARKS.md"
    text = path.read_text() if path.exists() else "# Benchmarks\n\n"
    pattern = re.compile(rf"^{re.escape(SECTION)}\n.*?(?=^## |\Z)", re.S | re.M)
    section = "\n".join(lines) + "\n"
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else text.rstrip("\n") + "\n\n" + section
    tmp = path.with_suffix(".md.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


if __name__ == "__main__":
    main()
