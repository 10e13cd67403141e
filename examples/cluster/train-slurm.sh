#!/bin/bash
# Data-parallel training on GPUs with SLURM: one MPI rank per GPU, several nodes.
#   sbatch examples/cluster/train-slurm.sh CONFIG.yaml
# Gradients are summed by NCCL (communication.backend auto), metrics and the NCCL unique id go
# over MPI; only rank 0 writes (output.dir on a shared file system). Resubmit with --resume to
# continue after the time limit (add --stop-after-epochs N to end cleanly before it).
#SBATCH --job-name=mlip-train
#SBATCH --nodes=2
#SBATCH --ntasks-per-node=4          # = GPUs per node
#SBATCH --gpus-per-node=4
#SBATCH --cpus-per-task=8            # CPU cores per rank: batch assembly, LibTorch's CPU threads
#SBATCH --time=24:00:00
set -euo pipefail
config=${1:?usage: sbatch train-slurm.sh CONFIG.yaml [mlip-trainer options]}
shift

# One thread per core given to the rank (LibTorch's intra-op threads for CPU-side work).
export OMP_NUM_THREADS=${SLURM_CPUS_PER_TASK:-1}
# NCCL: errors only (INFO to debug a hang); the network interface and InfiniBand device are
# usually found; name them where a node has several (e.g. NCCL_SOCKET_IFNAME=ib0, NCCL_IB_HCA=mlx5).
export NCCL_DEBUG=${NCCL_DEBUG:-WARN}

# Device binding: with --gpus-per-node and no --gpu-bind, every rank sees all GPUs of its node
# and mlip-trainer takes GPU (node-local rank mod GPUs): one GPU each. With --gpu-bind=single:1
# (or --gpus-per-task=1) each rank sees one GPU, cuda:0, and the same rule picks it.
srun --cpu-bind=cores mlip-trainer train "$config" --threads "$OMP_NUM_THREADS" \
  --set training.device=cuda "$@"
