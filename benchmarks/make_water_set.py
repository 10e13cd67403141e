#!/usr/bin/env python3
"""A synthetic water data set of any size, for the streaming benchmark (bench_stream.sh).

    make_water_set.py --trainer build/bin/mlip-trainer --model model.pt --frames N --out DIR

1. Base frames: --base frames of data/water-deepmd (64 H2O, cubic box of 12.4447 A), each atom
   displaced by a Gaussian of --sigma A (seeded).
2. Labels: energies and forces of the base frames from `model` (a model trained here), by
   `mlip-trainer test --per-frame --forces`.
3. N frames, each a base frame under one of the cube's 48 symmetries (signed permutations of
   the axes) and a random translation, wrapped into the box: the model's labels carry over
   exactly (the energy unchanged, forces rotated), so every frame is a distinct, consistently
   labelled structure.
4. Written as DeePMD systems of --per-system frames each (DIR/sys-NNNNN/), the format of
   data/water-deepmd, for `mlip-trainer pack DIR/sys-*`. Nothing else is needed than numpy.
"""
import argparse
import csv
import itertools
import os
import subprocess
import sys
import tempfile

import numpy as np


def read_deepmd(folder):
    types = np.loadtxt(os.path.join(folder, "type.raw"), dtype=int)
    names = open(os.path.join(folder, "type_map.raw")).read().split()
    coords, boxes = [], []
    for s in sorted(d for d in os.listdir(folder) if d.startswith("set.")):
        coords.append(np.load(os.path.join(folder, s, "coord.npy")))
        boxes.append(np.load(os.path.join(folder, s, "box.npy")))
    return types, names, np.concatenate(coords), np.concatenate(boxes)


def write_extxyz(path, species, positions, box):
    with open(path, "w") as out:
        for x, b in zip(positions, box):
            out.write(f"{len(species)}\n")
            lattice = " ".join(f"{v:.10f}" for v in b)
            out.write(f'Lattice="{lattice}" Properties=species:S:1:pos:R:3:forces:R:3 energy=0.0 pbc="T T T"\n')
            for s, p in zip(species, x.reshape(-1, 3)):
                out.write(f"{s} {p[0]:.10f} {p[1]:.10f} {p[2]:.10f} 0 0 0\n")


def label(trainer, model, xyz, n_frames, n_atoms, work):
    per_frame, forces = os.path.join(work, "frames.csv"), os.path.join(work, "forces.csv")
    subprocess.run([trainer, "test", model, xyz, "--per-frame", per_frame, "--forces", forces], check=True,
                   stdout=subprocess.DEVNULL)
    with open(per_frame) as f:
        rows = list(csv.DictReader(f))
    energy = np.array([float(r["energy_pred"]) for r in rows])
    with open(forces) as f:
        rows = list(csv.DictReader(f))
    force = np.array([[float(r[f"f{c}_pred"]) for c in "xyz"] for r in rows]).reshape(n_frames, n_atoms * 3)
    return energy, force


def symmetries():
    """The 48 signed permutation matrices (the cube's point group)."""
    out = []
    for perm in itertools.permutations(range(3)):
        for signs in itertools.product((1.0, -1.0), repeat=3):
            m = np.zeros((3, 3))
            for row, (col, s) in enumerate(zip(perm, signs)):
                m[row, col] = s
            out.append(m)
    return np.array(out)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trainer", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--frames", type=int, required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--base", type=int, default=2000)
    p.add_argument("--sigma", type=float, default=0.04)
    p.add_argument("--per-system", type=int, default=10000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--water", default=os.path.join(os.path.dirname(__file__), "..", "data", "water-deepmd"))
    a = p.parse_args()

    rng = np.random.default_rng(a.seed)
    parts = [read_deepmd(os.path.join(a.water, d)) for d in sorted(os.listdir(a.water)) if d.startswith("data_")]
    types, names = parts[0][0], parts[0][1]
    coords = np.concatenate([c for _, _, c, _ in parts])
    boxes = np.concatenate([b for _, _, _, b in parts])
    n_atoms = len(types)
    length = boxes[0, 0]
    if not np.allclose(boxes, np.diag([length] * 3).reshape(1, 9)):
        sys.exit("make_water_set.py: the water frames' boxes are not one cube")

    pick = rng.integers(len(coords), size=a.base)
    base = coords[pick] + rng.normal(0.0, a.sigma, size=(a.base, n_atoms * 3))
    with tempfile.TemporaryDirectory() as work:
        xyz = os.path.join(work, "base.xyz")
        write_extxyz(xyz, [names[t] for t in types], base, boxes[pick])
        energy, force = label(a.trainer, a.model, xyz, a.base, n_atoms, work)
    print(f"make_water_set: {a.base} base frames labelled by {a.model}", file=sys.stderr)

    ops = symmetries()
    os.makedirs(a.out, exist_ok=True)
    written = 0
    for k in range(0, a.frames, a.per_system):
        n = min(a.per_system, a.frames - k)
        b = rng.integers(a.base, size=n)
        op = ops[rng.integers(len(ops), size=n)]
        shift = rng.uniform(0.0, length, size=(n, 1, 3))
        x = np.einsum("nij,naj->nai", op, base[b].reshape(n, n_atoms, 3)) + shift
        x = np.mod(x, length)
        f = np.einsum("nij,naj->nai", op, force[b].reshape(n, n_atoms, 3))
        system = os.path.join(a.out, f"sys-{k // a.per_system:05d}")
        os.makedirs(os.path.join(system, "set.000"), exist_ok=True)
        np.savetxt(os.path.join(system, "type.raw"), types, fmt="%d")
        with open(os.path.join(system, "type_map.raw"), "w") as out:
            out.write("\n".join(names) + "\n")
        np.save(os.path.join(system, "set.000", "coord.npy"), x.reshape(n, -1))
        np.save(os.path.join(system, "set.000", "force.npy"), f.reshape(n, -1))
        np.save(os.path.join(system, "set.000", "energy.npy"), energy[b])
        np.save(os.path.join(system, "set.000", "box.npy"), np.tile(boxes[0], (n, 1)))
        written += n
    print(f"make_water_set: {written} frames in {-(-a.frames // a.per_system)} DeePMD systems under {a.out}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
