#!/usr/bin/env python3
"""Many tiny frames for the scaling benchmark of packs (bench_pack_scale.sh): a measure of what
the trainer holds per frame and of how long it takes to start, not of accuracy.

    make_tiny_set.py --frames N --seed S --out FILE.xyz

Each frame is one water molecule (O-H 0.96 A, H-O-H 104.5 degrees) in a 9 A periodic cube, turned
and shifted at random, with each atom displaced by a Gaussian of 0.05 A (seeded). Its labels
are a harmonic model of the displacements (bond stretch and angle bend about the geometry above),
consistent energies and forces, in eV and eV/A. Written as extended XYZ. Only numpy is needed.
"""
import argparse

import numpy as np

K_BOND, K_ANGLE = 25.0, 3.0            # eV/A^2, eV/rad^2
R0, THETA0 = 0.96, np.radians(104.5)


def energy_forces(x):
    """x: (3, 3) O, H, H. Harmonic bonds and angle; forces by central differences."""
    def energy(p):
        a, b = p[1] - p[0], p[2] - p[0]
        ra, rb = np.linalg.norm(a), np.linalg.norm(b)
        theta = np.arccos(np.clip(a @ b / (ra * rb), -1, 1))
        return 0.5 * K_BOND * ((ra - R0) ** 2 + (rb - R0) ** 2) + 0.5 * K_ANGLE * (theta - THETA0) ** 2 - 14.2
    h = 1e-5
    f = np.zeros_like(x)
    for i in range(3):
        for d in range(3):
            p, m = x.copy(), x.copy()
            p[i, d] += h
            m[i, d] -= h
            f[i, d] = -(energy(p) - energy(m)) / (2 * h)
    return energy(x), f


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, required=True)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    base = np.array([[0, 0, 0], [R0, 0, 0], [R0 * np.cos(THETA0), R0 * np.sin(THETA0), 0]])
    with open(a.out, "w") as out:
        for _ in range(a.frames):
            q, r = np.linalg.qr(rng.normal(size=(3, 3)))
            x = base @ (q * np.sign(np.diag(r))).T + rng.uniform(2, 7, size=3) + rng.normal(0, 0.05, size=(3, 3))
            e, f = energy_forces(x)
            out.write('3\nLattice="9 0 0 0 9 0 0 0 9" Properties=species:S:1:pos:R:3:forces:R:3 '
                      f'energy={e:.10f} pbc="T T T"\n')
            for name, p, g in zip("OHH", x, f):
                out.write(f"{name} {p[0]:.8f} {p[1]:.8f} {p[2]:.8f} {g[0]:.8f} {g[1]:.8f} {g[2]:.8f}\n")


if __name__ == "__main__":
    main()
