"""Models made by mace-torch, imported by python/mace_to_mlip.py, against mace-torch itself.

Usage: PYTHON mace_import.py MLIP_TRAINER OPS_LIBRARY WORK_DIR

For MACE models of several shapes (max_L 0, 1, 2; correlation 1, 2, 3; 1, 2 and 3 interactions;
random weights, float64), energies, forces and stress of mlip's ASE calculator equal those of
mace-torch's ASE calculator to 1e-10 (relative to the largest value of each) on a molecule, a
periodic water box and a triclinic cell; a structure with a species the model lacks is a clear
error. Exit 77 (ctest's skip code) when mace-torch is not installed in this Python.
"""
import os
import sys

os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
try:
    import numpy as np
    import torch
    from ase import Atoms
    from ase.io import read
    from e3nn import o3
    from mace import modules
    from mace.calculators import MACECalculator
except ImportError as error:
    print(f"skipped: {error} (scripts/install-deps.sh installs mace-torch into the torch venv)")
    sys.exit(77)
sys.path.insert(0, os.path.join(ROOT, "python"))
import mace_to_mlip  # noqa: E402
from mlip_ase import MLIPCalculator  # noqa: E402

TOLERANCE = 1e-10
# (max_L, correlation, num_interactions): every value of each at least once, and the default shape.
SHAPES = [(0, 1, 1), (0, 3, 2), (1, 2, 3), (1, 3, 2), (2, 3, 2), (2, 1, 3), (2, 2, 1)]


def make_model(max_L, correlation, layers, channels=8, seed=0, **extra):
    """A ScaleShiftMACE as `mace_run_train --model MACE` builds it, with random weights; `extra`:
    other constructor arguments (the refusal cases)."""
    torch.manual_seed(seed)
    hidden = o3.Irreps((channels * o3.Irreps.spherical_harmonics(max_L)).sort().irreps.simplify())
    return modules.ScaleShiftMACE(
        r_max=4.5, num_bessel=8, num_polynomial_cutoff=5, max_ell=3,
        interaction_cls=modules.interaction_classes["RealAgnosticResidualInteractionBlock"],
        interaction_cls_first=modules.interaction_classes["RealAgnosticInteractionBlock"],
        num_interactions=layers, num_elements=2, hidden_irreps=hidden, MLP_irreps=o3.Irreps("16x0e"),
        atomic_energies=np.array([-13.6, -2040.0]), avg_num_neighbors=9.7, atomic_numbers=[1, 8],
        correlation=correlation, gate=torch.nn.functional.silu, radial_MLP=[16, 16, 16],
        atomic_inter_scale=1.7, atomic_inter_shift=0.1, use_reduced_cg=False, **extra)


def structures():
    rng = np.random.default_rng(1)
    water = read(os.path.join(ROOT, "tests/data/libtorch-1.13/water.xyz"))
    water = water[:48]  # a quarter of the box's atoms, in the same box: periodic, fewer edges
    molecule = Atoms("OH2OH2OH", positions=[[0, 0, 0], [0.96, 0, 0], [-0.24, 0.93, 0], [2.8, 0.1, 0.2],
                                             [3.3, 0.8, 0.4], [3.2, -0.7, 0.1], [1.4, 2.6, 0.3], [1.9, 2.9, 1.0]])
    triclinic = Atoms("H2OH2O", cell=[[5.0, 0, 0], [1.2, 4.6, 0], [-0.7, 0.9, 4.8]], pbc=True,
                      scaled_positions=rng.uniform(0, 1, (6, 3)))
    return {"molecule": molecule, "water": water, "triclinic": triclinic}


def compare(name, ref, ours, periodic):
    worst = 0.0
    pairs = [("energy", ref.get_potential_energy(), ours.get_potential_energy()),
             ("forces", ref.get_forces(), ours.get_forces())]
    if periodic:
        pairs.append(("stress", ref.get_stress(), ours.get_stress()))
    for what, a, b in pairs:
        a, b = np.asarray(a), np.asarray(b)
        rel = float(np.abs(a - b).max() / max(np.abs(a).max(), 1e-300))
        worst = max(worst, rel)
        if not rel <= TOLERANCE:
            print(f"FAIL {name} {what}: relative difference {rel:.3g} > {TOLERANCE}")
            return False, worst
    return True, worst


def main():
    trainer, ops, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    torch.set_default_dtype(torch.float64)
    ok = True
    for max_L, corr, layers in SHAPES:
        tag = f"L{max_L}-c{corr}-t{layers}"
        src, dst = os.path.join(work, tag + ".model"), os.path.join(work, tag + ".pt")
        torch.save(make_model(max_L, corr, layers), src)
        if mace_to_mlip.main([src, "-o", dst, "--mlip-trainer", trainer, "--no-check"]) != 0:
            print(f"FAIL {tag}: import")
            ok = False
            continue
        mace_calc = MACECalculator(model_paths=src, device="cpu", default_dtype="float64")
        mlip_calc = MLIPCalculator(dst, ops_library=ops)
        for name, atoms in structures().items():
            ref, ours = atoms.copy(), atoms.copy()
            ref.calc, ours.calc = mace_calc, mlip_calc
            good, worst = compare(f"{tag} {name}", ref, ours, atoms.pbc.any())
            ok &= good
            print(f"{tag} {name:9s} ({len(atoms)} atoms): largest relative difference {worst:.2e}")
    # The TorchScript file of mace-torch's create_lammps_model imports to the same model.
    from e3nn.util import jit
    from mace.calculators import LAMMPS_MACE
    src = os.path.join(work, "L1-c3-t2.model")
    lammps_file, dst = os.path.join(work, "L1-c3-t2-lammps.pt"), os.path.join(work, "L1-c3-t2-from-lammps.pt")
    jit.compile(LAMMPS_MACE(torch.load(src, weights_only=False))).save(lammps_file)
    if mace_to_mlip.main([lammps_file, "-o", dst, "--mlip-trainer", trainer, "--no-check"]) != 0:
        print("FAIL: import of the create_lammps_model file")
        ok = False
    else:
        ref, ours = structures()["water"], structures()["water"]
        ref.calc = MACECalculator(model_paths=src, device="cpu", default_dtype="float64")
        ours.calc = MLIPCalculator(dst, ops_library=ops)
        good, worst = compare("from the LAMMPS file, water", ref, ours, True)
        ok &= good
        print(f"imported from the create_lammps_model file, water: largest relative difference {worst:.2e}")
    # Models mlip's mace does not compute are refused, with the reason.
    for extra, reason in (({"pair_repulsion": True}, "ZBL pair repulsion"),
                          ({"distance_transform": "Agnesi"}, "a distance transform"),
                          ({"heads": ["a", "b"]}, "several heads")):
        path = os.path.join(work, "refused.model")
        try:
            model = make_model(1, 2, 2, **extra)
            if "heads" in extra:  # two heads: two E0s per element
                model.atomic_energies_fn.atomic_energies = torch.tensor([[-13.6, -13.5], [-2040.0, -2039.0]])
            torch.save(model, path)
        except Exception as error:  # noqa: BLE001 - a mace-torch that cannot build it has nothing to refuse
            print(f"refusal case {extra} not built by this mace-torch: {error}")
            continue
        import contextlib
        import io
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = mace_to_mlip.main([path, "-o", os.path.join(work, "refused.pt"), "--mlip-trainer", trainer, "--no-check"])
        if rc == 0 or reason not in err.getvalue():
            print(f"FAIL: a model with {extra} was not refused naming '{reason}': rc {rc}, {err.getvalue().strip()}")
            ok = False
        else:
            print(f"refused: {err.getvalue().strip()}")
    # A species the model lacks (carbon) is an error that names it.
    lacking = Atoms("CH4", positions=[[0, 0, 0], [0.63, 0.63, 0.63], [-0.63, -0.63, 0.63], [-0.63, 0.63, -0.63],
                                      [0.63, -0.63, -0.63]])
    lacking.calc = MLIPCalculator(os.path.join(work, "L1-c3-t2.pt"), ops_library=ops)
    try:
        lacking.get_potential_energy()
        print("FAIL: a structure with carbon evaluated on an H, O model")
        ok = False
    except Exception as error:  # noqa: BLE001 - any error is right if it names the species
        if "C" not in str(error):
            print(f"FAIL: the error does not name the species: {error}")
            ok = False
        else:
            print(f"species the model lacks: {error}")
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
