#!/bin/bash
# GRPO training on several GPU nodes of a SLURM allocation, through Ray (docs/faults.md, "Multi-node on GPUs"):
#   sbatch docs/examples/slurm_multinode.sh [hydra overrides]      (from the project's folder)
# A Ray head on the first node, a Ray worker on each other node, then the run as a Ray job on the head. Ray 2.60
# authenticates every node and every client with one token: it is made once here and reaches every node and the
# submitting shell through the environment (srun passes this shell's environment on).
# The project must be installed at the same path on every node. Each step is a function, so that tests can run the
# same lines against a head on one machine (tests/training/test_ray_cluster.py).
#SBATCH --nodes=2 --ntasks-per-node=1 --gpus-per-node=8 --cpus-per-task=32 --exclusive
set -euo pipefail

RG_GRPO=${RG_GRPO:-$PWD}                      # the project's folder (the same on every node)
SELF="$RG_GRPO/docs/examples/slurm_multinode.sh"  # sbatch runs a copy of this file; srun runs the project's
RAY=${RAY:-$RG_GRPO/.venv/bin/ray}
RAY_PORT=${RAY_PORT:-6379}
DASHBOARD_PORT=${DASHBOARD_PORT:-8265}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
CONFIG=${CONFIG:-inter_algorithmic}

share_token() {  # one token for the whole cluster, exported to this shell and so to every srun step
  RAY_AUTH_TOKEN=${RAY_AUTH_TOKEN:-$("$RAY" get-auth-token --generate 2>/dev/null)}
  export RAY_AUTH_MODE=token RAY_AUTH_TOKEN
}

start_head() {  # start_head IP [ray start options]: the head node, in the foreground
  local ip=$1; shift
  "$RAY" start --head --block --node-ip-address="$ip" --port="$RAY_PORT" --dashboard-host=0.0.0.0 \
    --dashboard-port="$DASHBOARD_PORT" --num-gpus="$GPUS_PER_NODE" "$@"
}

join_head() {  # join_head IP [ray start options]: a worker node of the head at IP, in the foreground
  local ip=$1; shift
  "$RAY" start --block --address="$ip:$RAY_PORT" --num-gpus="$GPUS_PER_NODE" "$@"
}

wait_for_nodes() {  # wait_for_nodes IP N: until the cluster at IP has N nodes (10 minutes at most)
  for _ in $(seq 120); do
    if [[ $("$RAY" status --address="$1:$RAY_PORT" 2>/dev/null | grep -c ' node_') -ge $2 ]]; then return 0; fi
    sleep 5
  done
  echo "the Ray cluster at $1:$RAY_PORT has fewer than $2 nodes after 10 minutes" >&2
  return 1
}

submit() {  # submit IP [hydra overrides]: the training run as a Ray job; follows its log, returns when it ends
  local ip=$1 id=${SUBMISSION_ID:-rg-grpo-$(date +%s)}; shift
  local command="cd $(printf %q "$RG_GRPO") && .venv/bin/python training/train_grpo.py --config-name $CONFIG"
  command+=" $(printf '%q ' "$@")"
  for _ in $(seq 24); do
    "$RAY" job submit --address="http://$ip:$DASHBOARD_PORT" --submission-id="$id" -- bash -c "$command" && return 0
    # a job of that id exists: it ran and failed (or was stopped); else the head's job agent was not up yet
    if "$RAY" job status --address="http://$ip:$DASHBOARD_PORT" "$id" >/dev/null 2>&1; then return 1; fi
    sleep 5
  done
  return 1
}

main() {
  share_token
  local nodes head_ip node
  mapfile -t nodes < <(scontrol show hostnames "$SLURM_JOB_NODELIST")
  head_ip=$(srun -N1 -n1 -w "${nodes[0]}" hostname -I | awk '{print $1}')
  srun -N1 -n1 -w "${nodes[0]}" bash "$SELF" head "$head_ip" --num-cpus="$SLURM_CPUS_PER_TASK" &
  wait_for_nodes "$head_ip" 1
  for node in "${nodes[@]:1}"; do
    srun -N1 -n1 -w "$node" bash "$SELF" worker "$head_ip" --num-cpus="$SLURM_CPUS_PER_TASK" &
  done
  wait_for_nodes "$head_ip" "${#nodes[@]}"
  submit "$head_ip" trainer.nnodes="${#nodes[@]}" trainer.n_gpus_per_node="$GPUS_PER_NODE" "$@"
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
  case "${1:-}" in
    head) shift; start_head "$@" ;;
    worker) shift; join_head "$@" ;;
    *) main "$@" ;;
  esac
fi
