#!/usr/bin/env python3
"""The same training step as mlip-trainer, driven from Python (benchmarks/bench_train.sh).

Loads the trainable TorchScript module of an mlip-trainer checkpoint (checkpoints/*/model.pt)
with torch.jit.load, builds the water-deepmd graphs once with ASE (outside the timing, as
mlip-trainer reads them from its cache), and runs the step mlip-trainer runs: energies, forces
by autograd with create_graph, per-atom energy and per-component force MSE, backward, Adam.
Prints frames/s and the share of step time outside forward/backward and the optimiser.

Usage: bench_train_python.py MODEL.pt DATA_DIR --batch-frames B --steps N --threads T --ops LIBMLIP_OPS
"""
import argparse
import glob
import os
import time

import numpy as np
import torch
from ase.neighborlist import primitive_neighbor_list


def read_deepmd(root):
    """Frames (species index per atom, positions, cell, energy, forces) of a DeePMD npy tree."""
    frames = []
    for system in sorted(glob.glob(os.path.join(root, "**", "type.raw"), recursive=True)):
        sdir = os.path.dirname(system)
        types = np.loadtxt(system, dtype=np.int64, ndmin=1)
        type_map = open(os.path.join(sdir, "type_map.raw")).read().split()
        for sset in sorted(glob.glob(os.path.join(sdir, "set.*"))):
            coord = np.load(os.path.join(sset, "coord.npy"))
            box = np.load(os.path.join(sset, "box.npy"))
            energy = np.load(os.path.join(sset, "energy.npy"))
            force = np.load(os.path.join(sset, "force.npy"))
            for k in range(coord.shape[0]):
                frames.append(dict(elements=[type_map[t] for t in types], pos=coord[k].reshape(-1, 3),
                                   cell=box[k].reshape(3, 3), energy=float(energy[k]),
                                   forces=force[k].reshape(-1, 3)))
    return frames


def make_batch(frames, species, cutoff, dtype):
    """One graph of several frames, as mlip's GraphBatch (edge vectors x_j - x_i + shift . cell)."""
    sp, centers, neighbors, vectors, frame_of_atom, forces, energy, natoms = [], [], [], [], [], [], [], []
    offset = 0
    for k, f in enumerate(frames):
        i, j, s = primitive_neighbor_list("ijS", (True, True, True), f["cell"], f["pos"], cutoff)
        vec = f["pos"][j] - f["pos"][i] + s @ f["cell"]
        sp.append([species.index(e) for e in f["elements"]])
        centers.append(i + offset)
        neighbors.append(j + offset)
        vectors.append(vec)
        n = len(f["elements"])
        frame_of_atom.append(np.full(n, k))
        forces.append(f["forces"])
        energy.append(f["energy"])
        natoms.append(n)
        offset += n
    t = lambda a, dt: torch.from_numpy(np.ascontiguousarray(np.concatenate(a) if isinstance(a, list) else a)).to(dt)
    return dict(
        species=t([np.asarray(x) for x in sp], torch.int64),
        edge_index=torch.stack([t(centers, torch.int64), t(neighbors, torch.int64)]),
        edge_vectors=t(vectors, dtype),
        frame_of_atom=t(frame_of_atom, torch.int64),
        forces=t(forces, dtype),
        energy=torch.tensor(energy, dtype=dtype),
        natoms=torch.tensor(natoms, dtype=dtype),
        n_atoms=offset, n_frames=len(frames))


def step(module, opt, b, pe, pf):
    vectors = b["edge_vectors"].detach().requires_grad_(True)
    atom_energy = module(b["species"], b["edge_index"], vectors, b["n_atoms"])
    energy = torch.zeros(b["n_frames"], dtype=atom_energy.dtype).index_add(0, b["frame_of_atom"], atom_energy)
    g = torch.autograd.grad([energy.sum()], [vectors], create_graph=True)[0]
    forces = torch.zeros(b["n_atoms"], 3, dtype=g.dtype).index_add(0, b["edge_index"][0], g).index_add(
        0, b["edge_index"][1], -g)
    de = (energy - b["energy"]) / b["natoms"]
    df = forces - b["forces"]
    lf = torch.zeros(b["n_frames"], dtype=df.dtype).index_add(0, b["frame_of_atom"], (df * df).sum(1)) / (
        3.0 * b["natoms"])
    loss = (pe * de * de + pf * lf).sum() / b["n_frames"]
    loss.backward(inputs=opt.param_groups[0]["params"])   # parameters only, as mlip-trainer
    t_opt = time.perf_counter()
    opt.step()
    opt.zero_grad()
    return time.perf_counter() - t_opt


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("data")
    ap.add_argument("--batch-frames", type=int, default=1)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--cutoff", type=float, default=6.0)
    ap.add_argument("--species", default="O,H")
    ap.add_argument("--ops", help="libmlip_ops.so (the torch.ops.mlip operators se_e2_a calls)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.ops:
        torch.ops.load_library(args.ops)

    module = torch.jit.load(args.model)
    module.train()
    params = [p for p in module.parameters()]
    for p in params:
        p.requires_grad_(True)
    dtype = params[0].dtype
    opt = torch.optim.Adam(params, lr=1e-4)
    frames = read_deepmd(args.data)
    species = args.species.split(",")
    need = (args.steps + args.warmup) * args.batch_frames
    batches = []
    for s in range(args.steps + args.warmup):
        chosen = [frames[(s * args.batch_frames + k) % len(frames)] for k in range(args.batch_frames)]
        batches.append(make_batch(chosen, species, args.cutoff, dtype))
    assert need > 0

    for b in batches[:args.warmup]:  # profiling executor and allocator warm-up, untimed
        step(module, opt, b, 0.02, 1000.0)
    t_opt = 0.0
    t0 = time.perf_counter()
    for b in batches[args.warmup:]:
        t_opt += step(module, opt, b, 0.02, 1000.0)
    wall = time.perf_counter() - t0
    frames_done = args.steps * args.batch_frames
    print(f"python loop: {frames_done / wall:.2f} frames/s ({args.steps} steps of {args.batch_frames} frame(s), "
          f"{args.threads} thread(s), torch {torch.__version__}); optimizer {100 * t_opt / wall:.1f}% of step time")


if __name__ == "__main__":
    main()
