"""Backends: the OpenAI-compatible client against a local HTTP server (retries, backoff, timeouts, concurrency),
the builder registry, and the HF backend on the tiny model."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from evaluation.backends.base import GenRequest, build_backend, resolve_builder
from evaluation.backends.openai import OpenAIBackend, RequestFailed
from evaluation.config import ConfigError, ModelConfig, SamplingConfig


class Provider(BaseHTTPRequestHandler):
    """A small OpenAI-like server; behaviour is set on the server object."""

    def log_message(self, *args):
        pass

    def _send(self, code, body, headers=()):
        data = json.dumps(body).encode()
        self.send_response(code)
        for k, v in headers:
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        self._send(200, {"data": [{"id": "served-model"}]})

    def do_POST(self):
        srv = self.server
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with srv.lock:
            srv.calls.append(body)
            srv.in_flight += 1
            srv.max_in_flight = max(srv.max_in_flight, srv.in_flight)
            fail = srv.failures > 0
            srv.failures -= fail
        try:
            time.sleep(srv.delay)
        finally:
            # leave the in-flight count before answering: once the answer is out, the client may send its next
            # request before this thread runs again, which would count one request twice
            with srv.lock:
                srv.in_flight -= 1
        if body["messages"][-1]["content"] == "bad":
            return self._send(400, {"error": "bad request"})
        if fail:
            return self._send(503, {"error": "busy"}, [("Retry-After", "0.01")])
        n = min(body["n"], srv.max_n)
        choices = [{"message": {"content": f"<answer>{body['messages'][-1]['content']}</answer>"},
                    "finish_reason": "stop"} for _ in range(n)]
        self._send(200, {"choices": choices, "usage": {"completion_tokens": 4 * n}})


@pytest.fixture
def provider():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Provider)
    srv.lock, srv.calls, srv.in_flight, srv.max_in_flight = threading.Lock(), [], 0, 0
    srv.failures, srv.delay, srv.max_n = 0, 0.0, 99
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def backend_for(srv, **kw):
    cfg = ModelConfig(backend="openai", base_url=f"http://127.0.0.1:{srv.server_port}/v1", **kw)
    return OpenAIBackend(cfg, SamplingConfig(), sleep=lambda s: None)


def run(backend, prompts, n=2):
    got = {}
    reqs = [GenRequest(p, [{"role": "user", "content": p}], list(range(n))) for p in prompts]
    backend.generate(reqs, SamplingConfig(n=n), lambda r, comps: got.setdefault(r.key, comps))
    return got


def test_served_model_name_concurrency_bound_and_results(provider):
    provider.delay = 0.05
    backend = backend_for(provider, max_concurrency=3)
    assert backend.model_name == "served-model"
    got = run(backend, [f"q{i}" for i in range(12)])
    assert sorted(got) == sorted(f"q{i}" for i in range(12))
    assert [c.text for c in got["q3"]] == ["<answer>q3</answer>"] * 2 and got["q3"][0].num_tokens == 4
    assert 1 < provider.max_in_flight <= 3


def test_retries_on_503_then_succeeds(provider):
    provider.failures = 3
    got = run(backend_for(provider, max_concurrency=1, max_retries=5), ["a", "b"])
    assert set(got) == {"a", "b"} and len(provider.calls) == 5


def test_fewer_choices_than_n_are_topped_up(provider):
    provider.max_n = 1
    got = run(backend_for(provider), ["a"], n=3)
    assert len(got["a"]) == 3 and [c["n"] for c in provider.calls] == [3, 2, 1]


def test_client_errors_fail_fast_and_others_still_arrive(provider):
    backend = backend_for(provider, max_retries=5)
    got = {}
    reqs = [GenRequest(p, [{"role": "user", "content": p}], [0]) for p in ["ok", "bad", "ok2"]]
    with pytest.raises(RequestFailed, match=r"1 of 3 requests failed.*HTTP 400"):
        backend.generate(reqs, SamplingConfig(n=1), lambda r, c: got.setdefault(r.key, c))
    assert set(got) == {"ok", "ok2"} and sum(c["messages"][-1]["content"] == "bad" for c in provider.calls) == 1


def test_timeouts_are_retried_then_reported(provider):
    provider.delay = 1.0
    backend = backend_for(provider, request_timeout_s=0.2, max_retries=1)
    with pytest.raises(RequestFailed, match="after 2 tries"):
        run(backend, ["slow"], n=1)


def test_unreachable_server_fails_with_the_url():
    cfg = ModelConfig(backend="openai", path="m", base_url="http://127.0.0.1:9/v1", max_retries=0)
    with pytest.raises(RequestFailed, match="127.0.0.1:9"):
        run(OpenAIBackend(cfg, SamplingConfig(), sleep=lambda s: None), ["x"], n=1)


def test_registry_resolves_names_and_dotpaths():
    assert resolve_builder("openai").__name__ == "build_openai_backend"
    assert resolve_builder("evaluation.backends.hf:build_hf_backend").__name__ == "build_hf_backend"
    with pytest.raises(ConfigError, match="has no function nope"):
        resolve_builder("evaluation.backends.hf:nope")
    with pytest.raises(ConfigError, match="cannot import"):
        resolve_builder("no_such_pkg.mod:fn")


def test_hf_backend_generates_n_samples_per_prompt(tiny_model_dir):
    backend = build_backend(ModelConfig(path=str(tiny_model_dir), backend="hf", dtype="float32", batch_size=2),
                            SamplingConfig(max_tokens=8, n=2))
    got = {}
    reqs = [GenRequest(f"p{i}", [{"role": "user", "content": f"What is {i}+1?"}], [0, 1]) for i in range(3)]
    reqs.append(GenRequest("resumed", [{"role": "user", "content": "hi"}], [1]))
    backend.generate(reqs, SamplingConfig(max_tokens=8, n=2), lambda r, c: got.setdefault(r.key, c))
    assert {k: len(v) for k, v in got.items()} == {"p0": 2, "p1": 2, "p2": 2, "resumed": 1}
    assert all(0 < c.num_tokens <= 8 and c.finish_reason in ("stop", "length") for v in got.values() for c in v)


def test_hf_backend_on_a_cpu_decodes_with_gqa_sdpa_and_greedy_answers_are_transformers_own(tiny_model_dir):
    """On a CPU the evaluator attends through utils/gqa_sdpa.py (key/value heads read in place, not copied per
    step): a left-padded greedy batch gives the same completions as transformers' own sdpa, so a cached base-model
    evaluation and a fresh one agree."""
    from utils.gqa_sdpa import GQA_SDPA

    sampling = SamplingConfig(temperature=0.0, max_tokens=12, n=1)
    backend = build_backend(ModelConfig(path=str(tiny_model_dir), backend="hf", dtype="float32", batch_size=4),
                            sampling)
    assert backend.model.config._attn_implementation == GQA_SDPA
    assert backend.model.config.num_key_value_heads < backend.model.config.num_attention_heads  # grouped heads
    reqs = [GenRequest(f"p{i}", [{"role": "user", "content": "What is " + " + ".join(["7"] * (i + 1)) + "?"}], [0])
            for i in range(4)]  # prompts of different lengths: a padded batch

    def answers():
        got = {}
        backend.generate(reqs, sampling, lambda r, c: got.setdefault(r.key, [(x.text, x.num_tokens) for x in c]))
        return got

    grouped = answers()
    backend.model.set_attn_implementation("sdpa")
    assert answers() == grouped


def test_hf_greedy_drops_stopped_rows_and_answers_as_transformers_generate():
    """The CPU greedy loop stops decoding a row at its first stop token; every answer is generate()'s, cut there.
    A token generate() emits early in some rows and late or never in others serves as the stop token, so rows leave
    the batch at different steps. SmolLM2 (the tiny random model says one token over and over)."""
    import torch

    from utils.offline_models import prepare_smollm2

    sampling = SamplingConfig(temperature=0.0, max_tokens=16, n=1)
    backend = build_backend(ModelConfig(path=str(prepare_smollm2()), backend="hf", dtype="float32", batch_size=6),
                            sampling)
    questions = ["What is 7 + 8?", "Name a colour.", "How many letters are in 'banana'? Explain briefly.",
                 "Say hi.", "What is the capital of France? Answer in a full sentence please.", "2 * 3 = ?"]
    reqs = [GenRequest(f"p{i}", [{"role": "user", "content": q}], [0]) for i, q in enumerate(questions)]
    enc = backend.tokenizer([backend._render(r.messages) for r in reqs], return_tensors="pt", padding=True,
                            add_special_tokens=False)
    with torch.no_grad():
        full = backend.model.generate(**enc, do_sample=False, max_new_tokens=16,
                                      pad_token_id=backend.tokenizer.pad_token_id)[:, enc["input_ids"].shape[1]:]
    rows = full.tolist()

    def stop_lengths(token):  # each row's length when `token` stops it (16: never)
        return {row.index(token) + 1 if token in row else 16 for row in rows}

    stop = max({t for row in rows for t in row}, key=lambda t: len(stop_lengths(t)))
    assert len(stop_lengths(stop)) >= 3  # rows leave the batch at different steps
    backend._eos_ids = lambda: [stop]
    got = {}
    backend.generate(reqs, sampling,
                     lambda r, c: got.setdefault(r.key, (c[0].text, c[0].num_tokens, c[0].finish_reason)))
    for i, row in enumerate(rows):
        length = row.index(stop) + 1 if stop in row else len(row)
        finish = "stop" if stop in row else "length"
        assert got[f"p{i}"] == (backend.tokenizer.decode(row[:length], skip_special_tokens=True), length, finish)


@pytest.mark.parametrize("thinking", [True, False])
def test_hf_backend_renders_with_the_template_options_and_reports_an_opened_think_block(thinking):
    from utils.offline_models import tiny_qwen3_path

    model = ModelConfig(path=str(tiny_qwen3_path()), backend="hf", dtype="float32",
                        chat_template_kwargs={"enable_thinking": thinking})
    backend = build_backend(model, SamplingConfig(max_tokens=4, n=1))
    got = {}
    backend.generate([GenRequest("q", [{"role": "user", "content": "What is 2+3?"}], [0])],
                     SamplingConfig(max_tokens=4, n=1), lambda r, c: got.setdefault(r.key, c))
    assert [c.prompt_opens_think for c in got["q"]] == [thinking]
