"""OpenAI-compatible HTTP backend (a vLLM server or any provider), standard library only.

Bounded concurrency (a thread pool of `model.max_concurrency`), retries with exponential backoff and jitter on 429,
5xx and network errors (honouring Retry-After), a per-request timeout. Results reach the caller as each request
finishes; requests that still fail are reported together at the end, after everything else was saved.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor, as_completed

from evaluation.backends.base import Completion, GenRequest, OnResult
from evaluation.config import ModelConfig, SamplingConfig

log = logging.getLogger(__name__)
RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class RequestFailed(RuntimeError):
    """A request that cannot succeed (bad request, auth) or ran out of retries."""


class OpenAIBackend:
    """Chat completions against `model.base_url`; `n` samples per request (topped up if a provider returns fewer)."""

    name = "openai"

    def __init__(self, model_cfg: ModelConfig, sampling: SamplingConfig, sleep=time.sleep):
        self.cfg = model_cfg
        self.base_url = model_cfg.base_url.rstrip("/")
        self.api_key = os.environ.get(model_cfg.api_key_env, "")
        self.sleep = sleep
        self.model_name = model_cfg.path or self._first_model()

    def _call(self, method: str, path: str, body: dict | None = None) -> dict:
        """One HTTP call with retries; returns the decoded JSON."""
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        for attempt in range(self.cfg.max_retries + 1):
            req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
            try:
                with urllib.request.urlopen(req, timeout=self.cfg.request_timeout_s) as resp:
                    return json.loads(resp.read())
            except urllib.error.HTTPError as err:
                detail = err.read().decode(errors="replace")[:500]
                if err.code not in RETRY_STATUS or attempt == self.cfg.max_retries:
                    raise RequestFailed(f"{method} {self.base_url}{path}: HTTP {err.code}: {detail}") from err
                wait = float(err.headers.get("Retry-After") or 0) or self._backoff(attempt)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as err:
                if attempt == self.cfg.max_retries:
                    raise RequestFailed(f"{method} {self.base_url}{path}: {err} after {attempt + 1} tries") from err
                wait = self._backoff(attempt)
            log.warning("%s %s failed (try %d); retrying in %.1fs", method, path, attempt + 1, wait)
            self.sleep(wait)
        raise AssertionError("unreachable")

    @staticmethod
    def _backoff(attempt: int) -> float:
        return min(60.0, 2.0 ** attempt) * (0.5 + random.random())

    def _first_model(self) -> str:
        models = self._call("GET", "/models").get("data") or []
        if not models:
            raise RequestFailed(f"{self.base_url}/models lists no model; set model.path to the served name")
        return models[0]["id"]

    def _complete(self, req: GenRequest, sampling: SamplingConfig) -> list[Completion]:
        comps: list[Completion] = []
        while len(comps) < len(req.samples):
            n = len(req.samples) - len(comps)
            body = {"model": self.model_name, "messages": req.messages, "n": n, "temperature": sampling.temperature,
                    "top_p": sampling.top_p, "max_tokens": sampling.max_tokens}
            if self.cfg.chat_template_kwargs:  # vLLM's and SGLang's servers pass these to the template
                body["chat_template_kwargs"] = dict(self.cfg.chat_template_kwargs)
            out = self._call("POST", "/chat/completions", body)
            choices = out.get("choices") or []
            if not choices:
                raise RequestFailed(f"{self.base_url}/chat/completions returned no choices: {str(out)[:300]}")
            tokens = int((out.get("usage") or {}).get("completion_tokens") or 0)
            per_choice = round(tokens / len(choices))  # usage is summed over choices; exact when n == 1
            for ch in choices[:n]:
                text = (ch.get("message") or {}).get("content") or ""
                comps.append(Completion(text, per_choice, ch.get("finish_reason")))
        return comps

    def generate(self, requests: list[GenRequest], sampling: SamplingConfig, on_result: OnResult) -> None:
        """At most `max_concurrency` requests in flight; on_result runs in this thread."""
        failures = []
        with ThreadPoolExecutor(max_workers=self.cfg.max_concurrency) as pool:
            futures = {pool.submit(self._complete, r, sampling): r for r in requests}
            for fut in as_completed(futures):
                req = futures[fut]
                try:
                    comps = fut.result()
                except RequestFailed as err:
                    failures.append(f"{req.key}: {err}")
                    continue
                on_result(req, comps)
        if failures:
            raise RequestFailed(f"{len(failures)} of {len(requests)} requests failed (rerun to retry only those); "
                                f"first: {failures[0]}")

    def close(self) -> None:
        pass


def build_openai_backend(model_cfg: ModelConfig, sampling: SamplingConfig) -> OpenAIBackend:
    """Reads model.base_url, path (served name), api_key_env, max_concurrency, max_retries, request_timeout_s."""
    return OpenAIBackend(model_cfg, sampling)
