#!/bin/bash
# LAMMPS MD with pair_style mlip on GPUs under SLURM: one MPI rank per GPU, several nodes.
#   sbatch examples/cluster/md-slurm.sh MODEL.pt DATA_FILE
# LAMMPS decomposes the box over the ranks; each rank's model runs on its GPU (pair_style mlip
# ... device cuda: node-local rank mod visible GPUs), with all its local atoms in one call (set
# 'chunk N' in the input to bound GPU memory). Several ranks per GPU work too (enable CUDA MPS
# on the nodes); more ranks than GPUs only pays where LAMMPS's own CPU work (neighbour lists,
# communication) is the bottleneck.
#SBATCH --job-name=mlip-md
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4          # = GPUs per node
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8
#SBATCH --time=12:00:00
set -euo pipefail
model=${1:?usage: sbatch md-slurm.sh MODEL.pt DATA_FILE}
data=${2:?usage: sbatch md-slurm.sh MODEL.pt DATA_FILE}
export OMP_NUM_THREADS=1    # LibTorch's CPU threads are idle when the model runs on the GPU
srun --cpu-bind=cores lmp -in "$(dirname "$0")/../lammps/water/in.water" \
  -var model "$model" -var data "$data" -var device cuda -var steps 20000
