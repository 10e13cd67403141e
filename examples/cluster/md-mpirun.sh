#!/bin/bash
# LAMMPS MD with pair_style mlip on the GPUs of one node (or a hostfile's nodes) with mpirun:
#   examples/cluster/md-mpirun.sh MODEL.pt DATA_FILE [GPUS_PER_NODE] [HOSTFILE]
# CPU-only nodes: drop '-var device cuda' and run one rank per core instead
# (mpirun -np $(nproc) lmp ... , OMP_NUM_THREADS=1), which is what pair_style mlip is tuned for.
set -euo pipefail
model=${1:?usage: md-mpirun.sh MODEL.pt DATA_FILE [GPUS_PER_NODE] [HOSTFILE]}
data=${2:?usage: md-mpirun.sh MODEL.pt DATA_FILE [GPUS_PER_NODE] [HOSTFILE]}
gpus=${3:-$(nvidia-smi -L | wc -l)}
hostfile=${4:-}
nodes=1
[[ -n $hostfile ]] && nodes=$(grep -cv '^\s*#' "$hostfile")
export OMP_NUM_THREADS=1
mpirun -np $(( gpus * nodes )) ${hostfile:+--hostfile "$hostfile"} --map-by "ppr:$gpus:node" -x OMP_NUM_THREADS \
  lmp -in "$(dirname "$0")/../lammps/water/in.water" -var model "$model" -var data "$data" -var device cuda
