#!/bin/bash
# GRPO training on several GPU nodes of a SLURM allocation, through Ray (docs/faults.md, "Multi-node on GPUs"):
#   sbatch docs/examples/slurm_multinode.sh [hydra overrides]      (from the project's folder)
# Edit the #SBATCH line for your cluster: --nodes, --gpus-per-node and --time (add --partition or --account where your
# cluster asks for them). The script reads the nodes, their CPUs and GPUs from SLURM; nothing below needs editing.
# It checks the overrides, starts a Ray head on the first node and a Ray worker on each other node (a job step each,
# their output in slurm-JOBID-ray/ beside the job's output file), then runs the training's driver in this batch step
# against that cluster: its lines are the job's output file and its exit code the job's state. `scancel JOBID` ends
# the driver as SIGTERM does ("[train] stopped by SIGTERM" and the resume command; said by this script when the
# job's Ray node stopped first) and SLURM ends every Ray process of the job's steps.
# Ray authenticates every node and client with one token: it is made once here and reaches every node through the
# environment (srun passes this shell's environment on). The project must be installed at the same path on every node.
# Each step is a function, so that tests can run the same lines against a head on one machine
# (tests/training/test_ray_cluster.py) and submit the whole script to a real slurmctld (tests/training/test_slurm.py).
#SBATCH --nodes=2 --gpus-per-node=8 --time=24:00:00 --ntasks-per-node=1 --exclusive
set -euo pipefail

RG_GRPO=${RG_GRPO:-$PWD}                      # the project's folder (the same on every node)
SELF="$RG_GRPO/docs/examples/slurm_multinode.sh"  # sbatch runs a copy of this file; srun runs the project's
RAY=${RAY:-$RG_GRPO/.venv/bin/ray}
PYTHON=${PYTHON:-$RG_GRPO/.venv/bin/python}
RAY_PORT=${RAY_PORT:-6379}
DASHBOARD_PORT=${DASHBOARD_PORT:-8265}
CONFIG=${CONFIG:-inter_algorithmic}
RAY_HEAD_ARGS=${RAY_HEAD_ARGS:-}              # more `ray start` options for the head, or for every other node
RAY_WORKER_ARGS=${RAY_WORKER_ARGS:-}          # (word-split: --temp-dir, --object-store-memory, ports)

share_token() {  # one token for the whole cluster, exported to this shell and so to every srun step
  RAY_AUTH_TOKEN=${RAY_AUTH_TOKEN:-$("$RAY" get-auth-token --generate 2>/dev/null)}
  export RAY_AUTH_MODE=token RAY_AUTH_TOKEN
}

gpus_per_node() {  # the job's --gpus-per-node (SLURM_GPUS_PER_NODE: "8" or "a100:8"), or GPUS_PER_NODE
  local gpus=${GPUS_PER_NODE:-${SLURM_GPUS_PER_NODE:-}}
  if [[ -z $gpus ]]; then
    echo "[slurm] the job has no --gpus-per-node: add it to the #SBATCH line (or set GPUS_PER_NODE)" >&2
    return 1
  fi
  echo "${gpus##*:}"
}

one_gpu_mask() {  # SLURM's gres/gpu sets ROCR_VISIBLE_DEVICES beside CUDA_VISIBLE_DEVICES, on NVIDIA nodes too, and
  # verl's workers refuse both (verl/single_controller/base/worker.py): a node keeps the CUDA/HIP one
  if [[ -n ${CUDA_VISIBLE_DEVICES:-}${HIP_VISIBLE_DEVICES:-} ]]; then unset ROCR_VISIBLE_DEVICES; fi
}

start_head() {  # start_head IP [ray start options]: the head node, in the foreground
  local ip=$1; shift
  one_gpu_mask
  "$RAY" start --head --block --node-ip-address="$ip" --port="$RAY_PORT" --dashboard-host=0.0.0.0 \
    --dashboard-port="$DASHBOARD_PORT" "$@"
}

join_head() {  # join_head IP [ray start options]: a worker node of the head at IP, in the foreground
  local ip=$1; shift
  one_gpu_mask
  "$RAY" start --block --address="$ip:$RAY_PORT" "$@"
}

wait_for_nodes() {  # wait_for_nodes IP N [PID ...]: until the cluster at IP has N nodes (10 minutes at most), or
  local ip=$1 count=$2 pid; shift 2  # one of the PIDs (the nodes' job steps) has ended
  for _ in $(seq 120); do
    if [[ $("$RAY" status --address="$ip:$RAY_PORT" 2>/dev/null | grep -c ' node_') -ge $count ]]; then return 0; fi
    for pid in "$@"; do
      if ! kill -0 "$pid" 2>/dev/null; then
        echo "[slurm] a Ray node's job step ended before the cluster had $count node(s): see its log" >&2
        return 1
      fi
    done
    sleep 5
  done
  echo "[slurm] the Ray cluster at $ip:$RAY_PORT has fewer than $count nodes after 10 minutes" >&2
  return 1
}

main() {
  share_token
  local nodes head_ip node gpus cpus=$SLURM_CPUS_ON_NODE logs steps=() train
  gpus=$(gpus_per_node)
  mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
  logs=${RAY_LOGS:-${SLURM_SUBMIT_DIR:-$PWD}/slurm-$SLURM_JOB_ID-ray}
  mkdir -p "$logs"
  train=("$PYTHON" training/train_grpo.py --config-name "$CONFIG" trainer.nnodes="${#nodes[@]}"
         trainer.n_gpus_per_node="$gpus" "$@")
  cd "$RG_GRPO"
  "${train[@]}" --cfg job >/dev/null  # the overrides checked (hydra composes the config) before any node starts
  head_ip=$(srun -N1 -n1 -w "${nodes[0]}" hostname -I | awk '{print $1}')
  # shellcheck disable=SC2086  # RAY_HEAD_ARGS and RAY_WORKER_ARGS are lists of options
  srun -N1 -n1 -c "$cpus" -w "${nodes[0]}" bash "$SELF" head "$head_ip" --num-cpus="$cpus" --num-gpus="$gpus" \
    $RAY_HEAD_ARGS >"$logs/${nodes[0]}.log" 2>&1 &
  steps+=($!)
  wait_for_nodes "$head_ip" 1 "${steps[@]}" || { tail -n 20 "$logs/${nodes[0]}.log" >&2; return 1; }
  for node in "${nodes[@]:1}"; do
    # shellcheck disable=SC2086
    srun -N1 -n1 -c "$cpus" -w "$node" bash "$SELF" worker "$head_ip" --num-cpus="$cpus" --num-gpus="$gpus" \
      $RAY_WORKER_ARGS >"$logs/$node.log" 2>&1 &
    steps+=($!)
  done
  wait_for_nodes "$head_ip" "${#nodes[@]}" "${steps[@]}" || { tail -n 20 "$logs"/*.log >&2; return 1; }
  echo "[slurm] a Ray cluster of ${#nodes[@]} node(s) at $head_ip:$RAY_PORT; the nodes' Ray output: $logs"
  RAY_ADDRESS="$head_ip:$RAY_PORT" "${train[@]}" &
  wait_for_driver $!
}

wait_for_driver() {  # wait_for_driver PID: the driver's exit code, once it has ended. scancel (or the time limit) sends
  # SIGTERM to the driver and to every Ray process of the job at once: the driver says "[train] stopped by SIGTERM" and
  # the resume command (exit 143) while this shell waits, unless the head's raylet stopped first, for Ray then ends the
  # driver at once ("the local Raylet is dead", exit 1, no line): the stop is then said here, from SLURM's job state
  local driver=$1 status state
  trap : TERM
  while kill -0 "$driver" 2>/dev/null; do wait "$driver" || true; done
  wait "$driver" && status=0 || status=$?
  if [[ $status != 0 && $status != 143 ]]; then
    state=$(squeue -h -j "$SLURM_JOB_ID" -o %T 2>/dev/null || true)
    if [[ $state =~ ^(COMPLETING|CANCELLED|TIMEOUT|PREEMPTED) ]]; then
      echo "[slurm] job $SLURM_JOB_ID was stopped while training (state $state) and Ray ended the driver before" \
        "it could say so (exit $status); to resume from the last checkpoint, submit the same job again" >&2
    fi
  fi
  return "$status"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  case "${1:-}" in
    head) shift; start_head "$@" ;;
    worker) shift; join_head "$@" ;;
    *) main "$@" ;;
  esac
fi
