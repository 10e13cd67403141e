#!/bin/bash
# Data-parallel training on the GPUs of one or more nodes with plain mpirun (OpenMPI):
#   examples/cluster/train-mpirun.sh CONFIG.yaml [GPUS_PER_NODE] [HOSTFILE]
# One rank per GPU; each rank takes GPU (node-local rank mod visible GPUs).
set -euo pipefail
config=${1:?usage: train-mpirun.sh CONFIG.yaml [GPUS_PER_NODE] [HOSTFILE]}
gpus=${2:-$(nvidia-smi -L | wc -l)}
hostfile=${3:-}
nodes=1
[[ -n $hostfile ]] && nodes=$(grep -cv '^\s*#' "$hostfile")
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(( $(nproc) / gpus ))}
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}
# -x passes the variables to every rank; ppr:G:node places G ranks per node, bound to cores.
mpirun -np $(( gpus * nodes )) ${hostfile:+--hostfile "$hostfile"} --map-by "ppr:$gpus:node:pe=$OMP_NUM_THREADS" \
  -x OMP_NUM_THREADS -x NCCL_DEBUG -x PATH -x LD_LIBRARY_PATH \
  mlip-trainer train "$config" --threads "$OMP_NUM_THREADS" --set training.device=cuda
