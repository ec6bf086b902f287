"""The offline GPU kit (gpu_kit/), rehearsed on the CPU so that it cannot rot unseen:
- what it carries, chosen from the real requirements-gpu.lock against the target image (no network);
- its preparation on a small subset of real wheels from the registry (an sdist built here among them), the target
  side's checks of the parts (missing, damaged, complete), their reassembly and the install into a scratch venv laid
  over this environment, which stands in for the GPU image (its packages shadowed, never changed; torch its own);
- the staged runner: stage a and a check of every other stage's command on the CPU (--dry-run), and its
  bookkeeping (records as stages end, skips on a re-run, blocked, waiting, interrupted at the deadline, deferred).
"""

import json
import os
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from gpu_kit import chunks, consistency, gpu_path, selection
from gpu_kit.run import Runner, Stage
from gpu_kit.summary import export, write_summary

REPO = Path(__file__).resolve().parents[2]
PINS = selection.read_lock(REPO / "requirements-gpu.lock")
PYTHON = "%d.%d" % sys.version_info[:2]


def pypi_reachable() -> bool:
    try:
        socket.create_connection(("pypi.org", 443), timeout=5).close()
        return True
    except OSError:
        return False


def test_the_kernel_tier_is_vllms_kernel_packages_and_what_only_they_pull_in():
    kernels = selection.kernel_tier(PINS)
    assert {"flashinfer-cubin", "flashinfer-python", "tilelang", "nvidia-cutlass-dsl", "z3-solver",
            "tokenspeed-triton", "nvidia-cuda-nvcc"} <= kernels
    assert not kernels & {"vllm", "xgrammar", "apache-tvm-ffi", "numpy", "torch", "ray", "verl"}  # core needs them
    for name in kernels - set(selection.KERNEL_ROOTS):
        assert PINS[name].via and all(parent in kernels for parent in PINS[name].via), name


def test_the_benchmarks_tier_is_lm_eval_and_what_only_it_pulls_in():
    benchmarks = selection.kernel_tier(PINS, selection.BENCHMARK_ROOTS)
    assert {"lm-eval", "scikit-learn", "scipy", "sacrebleu", "sqlitedict"} <= benchmarks
    assert not benchmarks & {"datasets", "transformers", "torch", "accelerate", "numpy"}  # the GPU path needs them
    image = selection.read_image(REPO / "gpu_kit" / "image.txt")
    assert {c.pin.name for c in selection.select(PINS, image) if c.tier == "benchmarks"} <= benchmarks


def test_the_image_stack_stays_and_python_312_gets_the_setuptools_vllm_needs():
    image = selection.read_image(REPO / "gpu_kit" / "image.txt")
    overrides = selection.read_pins(REPO / "gpu_kit" / "python3.12.txt")
    choices = {c.pin.name: c for c in selection.select(PINS, image, overrides)}
    for name in ("torch", "triton", "nvidia-cublas", "nvidia-nccl-cu13", "cuda-toolkit", "torchvision"):
        assert choices[name].tier is None and choices[name].reason == "image stack", name
    assert choices["safetensors"].tier is None  # the image has the lock's 0.8.0
    assert (choices["transformers"].tier, choices["transformers"].reason) == ("core", "image has 5.17.0")
    assert choices["vllm"].tier == "core" and choices["flashinfer-cubin"].tier == "kernels"
    assert choices["pandas"].reason == "image version unknown"
    assert choices["setuptools"].pin.version == PINS["setuptools"].version == "80.10.2"  # < 81 for vllm on 3.12


def test_an_image_whose_torch_differs_from_the_lock_is_refused_naming_both():
    image = selection.Image({"torch": "2.10.0"}, {"torch"})
    with pytest.raises(ValueError, match=r"image's torch is 2\.10\.0, requirements-gpu.lock pins 2\.11\.0"):
        selection.select(PINS, image)


def fake_wheel(folder: Path, name: str, version: str, requires: list[str]) -> Path:
    path = folder / f"{name}-{version}-py3-none-any.whl"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(f"{name}-{version}.dist-info/METADATA", metadata)
    return path


def test_the_requirement_check_evaluates_markers_and_extras_for_the_targets_python(tmp_path):
    wheel = fake_wheel(tmp_path, "vllm", "0.24.0", ['setuptools<81.0.0,>=77.0.3; python_version > "3.11"',
                                                   "flashinfer-python==0.6.12", 'av; extra == "audio"'])
    versions = {"vllm": "0.24.0", "setuptools": "81.0.0", "av": None}

    def needed(python, top=()):
        return sorted(name for name, _ in consistency.problems({"vllm": wheel}, versions, python, top))

    assert needed("3.11") == ["flashinfer-python"]
    assert needed("3.12") == ["flashinfer-python", "setuptools"]  # what the real lock does on 3.12
    versions.pop("av")
    from packaging.requirements import Requirement
    assert needed("3.11", [Requirement("vllm[audio]")]) == ["av", "flashinfer-python"]


def test_parts_round_trip_and_a_missing_or_damaged_part_is_named(tmp_path):
    source = tmp_path / "src"
    source.mkdir()
    for name, size in (("a.whl", 300_000), ("b.whl", 123_457), ("c.tar.gz", 10)):
        (source / name).write_bytes(os.urandom(size))
    dist = tmp_path / "dist"
    manifest = chunks.pack(sorted(source.iterdir()), "core", dist, 100_000, {"python": PYTHON})
    assert [p["folder"] for p in manifest["parts"]] == [f"core-0{i}" for i in range(1, 6)]
    assert all(p["bytes"] <= 100_000 for p in manifest["parts"])
    assert chunks.pack(sorted(source.iterdir()), "core", tmp_path / "again", 100_000, {"python": PYTHON}) \
        ["tar_sha256"] == manifest["tar_sha256"]  # deterministic: the same files give the same parts
    part = dist / "core-03" / "core.tar.part03"
    kept = part.read_bytes()
    part.unlink()
    state = chunks.scan(dist, "core")
    assert not state.complete and state.missing == ["core-03"] and "missing 1: core-03" in state.describe()
    with pytest.raises(ValueError, match="cannot unpack"):
        chunks.extract(dist, state, tmp_path / "out")
    part.write_bytes(kept[:-1] + bytes([kept[-1] ^ 1]))
    assert chunks.scan(dist, "core").bad == ["core-03: SHA-256 differs from the manifest"]
    part.write_bytes(kept)
    files = chunks.extract(dist, chunks.scan(dist, "core"), tmp_path / "out")
    assert {f.name: f.read_bytes() for f in files} == {p.name: p.read_bytes() for p in source.iterdir()}
    chunks.pack([source / "c.tar.gz"], "core", tmp_path / "other", 100_000, {})
    (tmp_path / "other" / "core-01").rename(dist / "core-09")  # a part of another kit among these
    with pytest.raises(ValueError, match="belongs to another kit"):
        chunks.scan(dist, "core")


def kit_install(*args, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpu_kit.install", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.skipif(not pypi_reachable(), reason="pypi.org cannot be reached from here")
def test_rehearsal_prepare_from_the_registry_then_install_over_this_environment(tmp_path):
    """six at another version than this environment's (shadowed), diskcache absent from it (a requirement of the
    CUDA vLLM only), zss 1.1.4 only an sdist (built here), pip for the venv; parts of 0.25 MiB, carried one at a
    time."""
    lock = tmp_path / "lock.txt"
    lock.write_text("diskcache==5.6.3\n    # via vllm\nsix==1.16.0\n    # via zss\n"
                    "zss==1.1.4\n    # via reasoning-gym\n")
    (tmp_path / "image.txt").write_text("torch  # stack\n")
    freeze = subprocess.run([sys.executable, "-m", "pip", "list", "--format=freeze"], capture_output=True,
                            text=True, check=True).stdout
    assert "six==1.17.0" in freeze and "zss==1.2.0" in freeze and "diskcache" not in freeze
    (tmp_path / "freeze.txt").write_text(freeze)
    made = tmp_path / "made"
    prepared = subprocess.run(
        [sys.executable, "-m", "gpu_kit.prepare", "--lock", lock, "--image", tmp_path / "image.txt",
         "--image-freeze", tmp_path / "freeze.txt", "--python-version", PYTHON, "--smollm2", "",
         "--part-mib", "0.25", "--work", tmp_path / "work", "--dist", made],
        cwd=REPO, capture_output=True, text=True, timeout=300)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr[-3000:]
    manifest = json.loads((made / "core-01" / chunks.MANIFEST).read_text())
    assert manifest["requirements"] == ["diskcache==5.6.3", "pip==26.3", "six==1.16.0", "zss==1.1.4"]
    assert manifest["sdists"] == [] and any(f["name"].startswith("zss-1.1.4-py3") for f in manifest["files"])
    assert all(p["bytes"] <= 0.25 * 2**20 for p in manifest["parts"]) and len(manifest["parts"]) >= 4
    assert "call  1: carry" in prepared.stdout

    dist, venv = tmp_path / "target" / "dist", tmp_path / "target" / ".venv-kit"
    target = ["--dist", dist, "--venv", venv, "--work", tmp_path / "target" / "work"]
    dist.mkdir(parents=True)
    (made / "core-01").rename(dist / "core-01")  # the first call brings one part
    waiting = kit_install("install", *target)
    assert waiting.returncode == 2 and not venv.exists()
    assert f"waiting for core-02 and {len(manifest['parts']) - 2} more (1 of {len(manifest['parts'])}" in waiting.stdout
    for folder in sorted(made.glob("core-*")):
        folder.rename(dist / folder.name)
    part = next(dist.glob("core-02/core.tar.part02"))
    kept = part.read_bytes()
    part.write_bytes(kept[:100])
    damaged = kit_install("install", *target)
    assert damaged.returncode == 4 and "core-02: 100 bytes" in damaged.stdout and "carry them again" in damaged.stdout
    part.write_bytes(kept)
    done = kit_install("install", *target, "--report", tmp_path / "install.json")
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    report = json.loads((tmp_path / "install.json").read_text())["core"]
    assert report["pip_check"] == [] and report["packages"] == 4

    probe = ("import importlib.util as u, json, six, zss, diskcache, envs; print(json.dumps({'six': six.__version__,"
             " 'six_file': six.__file__, 'zss': zss.__file__, 'torch': u.find_spec('torch').origin}))")
    seen = json.loads(subprocess.run([venv / "bin" / "python", "-c", probe], capture_output=True, text=True,
                                     check=True).stdout)
    assert seen["six"] == "1.16.0" and seen["six_file"].startswith(str(venv)) and seen["zss"].startswith(str(venv))
    assert seen["torch"] == __import__("importlib.util").util.find_spec("torch").origin  # the image's torch
    import six
    assert six.__version__ == "1.17.0"  # the "image" is untouched
    again = kit_install("install", *target)
    assert again.returncode == 0 and "installed already" in again.stdout


def python_stage(stage_id: str, code: str, **kwargs) -> Stage:
    return Stage(stage_id, stage_id, [sys.executable, "-c", code], **kwargs)


def test_stages_are_recorded_as_they_end_and_a_rerun_skips_what_finished(tmp_path):
    left_over = tmp_path / "runs" / "ok"
    (left_over / "ckpt").mkdir(parents=True)
    stages = [python_stage("ok", "print('(x) step:1 - a:1')", marks=gpu_path.STEP_MARK, fresh=str(left_over)),
              python_stage("broken", "print('error: the weights differ'); print('exit'); raise SystemExit(1)"),
              python_stage("after_broken", "print('never')", needs=("broken",)),
              python_stage("parts", "raise SystemExit(2)", exit_codes={2: "waiting"}),
              python_stage("later", "print('never')")]
    out = tmp_path / "out"
    assert Runner(stages, out, {}, until_s=300).run() == 1
    runner = Runner(stages, out, {}, until_s=300)
    status = {s.id: (runner.record(s.id) or {}).get("status") for s in stages}
    assert status == {"ok": "done", "broken": "failed", "after_broken": "blocked", "parts": "waiting",
                      "later": None}
    assert runner.record("broken")["why"] == "error: the weights differ"  # the summary names the cause
    assert "step:1" in runner.record("ok")["marks"] and (out / "ok" / "log.txt").read_text().startswith("(x)")
    assert not left_over.exists()  # a first run starts in an empty folder
    ok_ended = runner.record("ok")["ended"]
    assert runner.run() == 0  # ok and broken finished: skipped; parts waits again
    assert runner.record("ok")["ended"] == ok_ended and runner.record("parts")["status"] == "waiting"
    assert Runner(stages, out, {}, until_s=300, retry_failed=True).run() == 1  # broken runs again
    summary = write_summary(runner).read_text()
    assert "| broken | failed |" in summary and "| later | not run |" in summary
    sent = export(out, tmp_path / "export", keep=1000)
    assert len(sent) <= 8 and {p.name for p in sent} >= {"results.json", "summary.md", "logs.tar.gz"}


def test_a_stage_at_the_deadline_is_interrupted_then_runs_again_and_a_long_one_waits_for_a_new_command(tmp_path):
    flag = tmp_path / "flag"
    code = (f"import pathlib, time; p = pathlib.Path({str(flag)!r})\n"
            "if p.exists(): raise SystemExit(0)\np.touch(); print('started', flush=True); time.sleep(60)")
    stages = [python_stage("slow", code, cleanup=[sys.executable, "-c", "print('cleaned')"]),
              python_stage("long", "print('ran')", estimate_s=400)]
    Runner(stages, tmp_path, {}, until_s=2).run()
    runner = Runner(stages, tmp_path, {}, until_s=300)
    assert runner.record("slow")["status"] == "interrupted" and runner.record("slow")["seconds"] < 30
    assert runner.record("long") is None
    runner.run()
    assert runner.record("slow")["status"] == "done"
    assert runner.record("long")["status"] == "deferred" and "needs ~400 s" in runner.record("long")["why"]
    Runner(stages, tmp_path, {}, until_s=300).run()  # the first stage of a command always starts
    assert runner.record("long")["status"] == "done"


def test_the_runner_lists_every_stage_of_the_gpu_path():
    listed = subprocess.run([sys.executable, "-m", "gpu_kit.run", "--list"], cwd=REPO, capture_output=True,
                            text=True, timeout=60).stdout
    ids = [line.split()[0] for line in listed.splitlines()]
    fresh = {stage.id: stage.fresh for stage in gpu_path.build_stages() if stage.fresh}
    assert fresh == {"b1_tiny_train": "{out}/runs/tiny", "b3_smollm2_train": "{out}/runs/smollm2",
                     "g1_speed_smollm2": "{out}/runs/speed-smollm2", "g2_speed_qwen15b": "{out}/runs/speed-qwen15b",
                     "g3_speed_qwen05b": "{out}/runs/speed-qwen05b", "g4_skip_qwen15b": "{out}/runs/skip-qwen15b",
                     "g4_noskip_qwen15b": "{out}/runs/noskip-qwen15b", "g5_sync_qwen3": "{out}/runs/sync-qwen3",
                     "g5_async_qwen3": "{out}/runs/async-qwen3"}  # not resumes
    assert ids == ["a_machine", "a_actor_bench", "install_core", "install_kernels", "a_kit_env", "b1_tiny_train", "b2_tiny_resume",
                   "b3_smollm2_train", "b4_smollm2_resume", "c1_export", "c2_eval_vllm", "d_vllm_alone",
                   "g1_speed_smollm2", "g2_speed_qwen15b", "g3_speed_qwen05b", "g4_skip_qwen15b", "g4_noskip_qwen15b",
                   "g5_sync_qwen3", "g5_async_qwen3", "f_quickstart", "f_quickstart_seed1",
                   "f_quickstart_seed2", "e_gpu_tests"]


def test_the_speed_stages_train_grpo_as_the_presets_do_and_the_quickstart_stages_its_own_recipe():
    """The speed stages measure the GRPO users train (a reference model for the KL loss, activation recomputation, two
    updates a step: the GPU steps of 2026-11-26), not the quickstart's lighter recipe, which b3 and f_quickstart run."""
    from training.launch.config import compose_config

    def overrides(stage):
        return [o.replace("{out}", "/kit/out") for o in stage.compose[1] if not o.startswith("hydra.")]

    composed = {stage.id: compose_config(stage.compose[0], overrides(stage))
                for stage in gpu_path.build_stages() if stage.compose}
    for stage_id in ("g1_speed_smollm2", "g2_speed_qwen15b", "g3_speed_qwen05b"):
        cfg = composed[stage_id]
        assert cfg.actor_rollout_ref.actor.use_kl_loss and cfg.actor_rollout_ref.model.enable_gradient_checkpointing
        assert cfg.data.train_batch_size == 2 * cfg.actor_rollout_ref.actor.ppo_mini_batch_size, stage_id
    for stage_id in ("b3_smollm2_train", "f_quickstart", "f_quickstart_seed1", "f_quickstart_seed2"):
        actor = composed[stage_id].actor_rollout_ref.actor
        assert not actor.use_kl_loss and actor.optim.lr == 3e-5, stage_id
        assert actor.ppo_mini_batch_size == composed[stage_id].data.train_batch_size == 16, stage_id
    assert [composed[f"f_quickstart{tail}"].env.seed for tail in ("", "_seed1", "_seed2")] == [0, 1, 2]
    from training.zero_advantage.rules import skip_refusal  # the skip stages: the same run, the skip on and off

    assert skip_refusal(composed["g4_skip_qwen15b"]) is None
    assert skip_refusal(composed["g4_noskip_qwen15b"]) == "env.skip_zero_advantage=false"


def test_the_async_stages_differ_only_in_the_trainer_and_pass_the_launch_checks():
    """g5: the same Qwen3-1.7B-shaped run with thinking-length responses in sync and in async mode; each passes the
    launch's config checks, and its agent loop resolves to the registry entry that draws the lengths."""
    import hydra
    from omegaconf import OmegaConf

    from training.trainer.thinking_lengths import AGENT_LOOP_NAME, ThinkingLengthAgentLoop
    from training.launch.checks import trainer_mode_problems
    from training.launch.config import compose_config, resolve_config

    stages = {stage.id: stage for stage in gpu_path.build_stages()}
    sync, async_ = (stages[name].compose[1] for name in ("g5_sync_qwen3", "g5_async_qwen3"))
    assert ([o for o in sync if "trainer_mode" not in o and "sync-qwen3" not in o]
            == [o for o in async_ if "trainer_mode" not in o and "async-qwen3" not in o])
    for overrides, mode in ((sync, "reasoning_gym"), (async_, "reasoning_gym_async")):
        # the random model's path is left out: resolve_config would build its 1.7B weights
        cfg = compose_config("quickstart", [o.replace("{out}", "/kit/out") for o in overrides
                                            if not o.startswith("hydra.") and not o.endswith("random:qwen3-1.7b")])
        assert cfg.trainer.v1.trainer_mode == mode and trainer_mode_problems(cfg) == []
        assert cfg.data.max_response_length == 4096 and cfg.actor_rollout_ref.rollout.ignore_eos
        agent = resolve_config(cfg, gpu_count=1).actor_rollout_ref.rollout.agent
        assert agent.default_agent_loop == AGENT_LOOP_NAME
        entries = {entry.name: entry for entry in OmegaConf.load(agent.agent_loop_config_path)}
        assert hydra.utils.get_class(entries[AGENT_LOOP_NAME]._target_) is ThinkingLengthAgentLoop


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_dry_run_runs_stage_a_and_checks_every_other_command_on_the_cpu(tmp_path):
    """Every stage's command is checked: the training overrides compose (a bad key fails), the other commands
    answer --help, the gpu tests collect; stage a runs for real and reports no CUDA here."""
    bogus = Stage("z_bogus", "a stage whose override names no config key", ["{kit}", "training/train_grpo.py"],
                  compose=("quickstart", ["trainer.no_such_key=1"]))
    out = tmp_path / "out"
    runner = Runner([*gpu_path.build_stages(), bogus], out, {"kit": sys.executable, "image": sys.executable,
                                                            "out": str(out)}, until_s=600)
    assert runner.dry_run() == 1
    status = {stage.id: runner.record(stage.id)["status"] for stage in runner.stages}
    assert status.pop("z_bogus") == "dry-failed" and set(status.values()) == {"dry-ok"}, status
    assert "no_such_key" in runner.record("z_bogus")["problems"][0]
    machine = runner.record("a_machine")["results"]
    assert machine["torch"]["cuda_available"] is False and machine["versions"]["torch"]
    assert (out / "a_machine" / "image-freeze.txt").read_text().count("==") > 100
    write_summary(runner)
    sent = export(out, tmp_path / "export", keep=1000)
    assert {p.name for p in sent} == {"results.json", "summary.md", "image-freeze.txt", "logs.tar.gz"}
