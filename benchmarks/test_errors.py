"""test_errors.py TEST.xyz MACE_MODEL MLIP_MODEL OPS_LIBRARY [TRAIN.xyz]: test errors of a mace-torch
model and an mlip model on the same frames (extended XYZ with REF_energy and REF_forces), each
through its own ASE calculator, float64; with TRAIN.xyz also those of the E0-only baseline (energies
per element fitted by least squares to TRAIN's frames, zero forces).

Prints a line per model, then one line "E_mace F_mace E_mlip F_mlip [E_base F_base]": energy RMSE
per atom (meV/atom) and force RMSE over all components (meV/A). benchmarks/bench_mace.sh uses it.
"""
import os
import sys

import numpy as np
from ase.io import read

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def errors(frames, calc):
    de, df = [], []
    for atoms in frames:
        a = atoms.copy()
        a.calc = calc
        de.append((a.get_potential_energy() - atoms.info["REF_energy"]) / len(a))
        df.append((a.get_forces() - atoms.arrays["REF_forces"]).reshape(-1))
    return 1e3 * float(np.sqrt(np.mean(np.square(de)))), 1e3 * float(np.sqrt(np.mean(np.square(np.concatenate(df)))))


def e0_baseline(train, frames):
    """Energy and force RMSE of sum_Z n_Z E0_Z, E0 fitted to `train`'s energies by least squares."""
    elements = sorted({z for a in train + frames for z in a.numbers})
    counts = lambda fs: np.array([[np.sum(a.numbers == z) for z in elements] for a in fs], dtype=float)
    e0, *_ = np.linalg.lstsq(counts(train), np.array([a.info["REF_energy"] for a in train]), rcond=None)
    de = [(c @ e0 - a.info["REF_energy"]) / len(a) for c, a in zip(counts(frames), frames)]
    df = np.concatenate([a.arrays["REF_forces"].reshape(-1) for a in frames])
    return 1e3 * float(np.sqrt(np.mean(np.square(de)))), 1e3 * float(np.sqrt(np.mean(np.square(df))))


def main(test, mace_model, mlip_model, ops, train=None):
    from mace.calculators import MACECalculator
    from mlip_ase import MLIPCalculator
    frames = read(test, index=":")
    out = []
    for name, calc in (("mace-torch", MACECalculator(model_paths=mace_model, device="cpu", default_dtype="float64")),
                       ("mlip", MLIPCalculator(mlip_model, ops_library=ops))):
        e, f = errors(frames, calc)
        print(f"{name}: {len(frames)} frames, energy RMSE {e:.3f} meV/atom, force RMSE {f:.2f} meV/A")
        out += [e, f]
    if train is not None:
        e, f = e0_baseline(read(train, index=":"), frames)
        print(f"E0-only baseline: energy RMSE {e:.3f} meV/atom, force RMSE {f:.2f} meV/A")
        out += [e, f]
    print(" ".join(f"{v:.4g}" for v in out))


if __name__ == "__main__":
    if len(sys.argv) not in (5, 6):
        sys.exit(__doc__)
    main(*sys.argv[1:])
