"""mlip_ase.MLIPCalculator against pair_style mlip in LAMMPS on a triclinic water box.

Usage: PYTHON ase_calculator.py LMP OPS_LIBRARY MODEL.pt [MODEL.pt ...]
Exit 0 when energies, per-atom energies, forces and stress agree to 1e-10 (relative) for every
model; 77 (ctest's skip code) when ase or mlip_ase is not installed in this Python.
"""
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
try:
    import numpy as np
    from ase.io import read
except ImportError as error:
    print(f"skipped: {error} (scripts/install-deps.sh installs ase into the torch venv)")
    sys.exit(77)
sys.path.insert(0, os.path.join(ROOT, "python"))  # the package from this checkout
from mlip_ase import MLIPCalculator  # noqa: E402

NKTV2P_METAL = 1.6021765e6  # LAMMPS metal units: eV/A^3 -> bar
TOLERANCE = 1e-10


def triclinic_water():
    """Frame 0 of data/water-deepmd (192 atoms), sheared into a LAMMPS-shaped triclinic cell."""
    atoms = read(os.path.join(ROOT, "tests/data/libtorch-1.13/water.xyz"))
    lengths = atoms.cell.lengths()
    cell = np.array([[lengths[0], 0, 0], [1.5, lengths[1], 0], [-1.0, 0.8, lengths[2]]])
    atoms.set_cell(cell, scale_atoms=True)
    atoms.rattle(0.05, seed=3)
    atoms.wrap()
    return atoms


def write_lammps_data(atoms, path, elements):
    (a, b, c), g = np.asarray(atoms.cell), "{:.17g}".format
    lines = ["water, triclinic (tests/python/ase_calculator.py)", "",
             f"{len(atoms)} atoms", f"{len(elements)} atom types", "",
             f"0 {g(a[0])} xlo xhi", f"0 {g(b[1])} ylo yhi", f"0 {g(c[2])} zlo zhi",
             f"{g(b[0])} {g(c[0])} {g(c[1])} xy xz yz", "", "Atoms # atomic", ""]
    for k, (symbol, x) in enumerate(zip(atoms.get_chemical_symbols(), atoms.get_positions())):
        lines.append(f"{k + 1} {elements.index(symbol) + 1} {g(x[0])} {g(x[1])} {g(x[2])}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def run_lammps(lmp, model, atoms, elements, work):
    """Energy, per-atom energies, forces and ASE-convention stress from pair_style mlip."""
    write_lammps_data(atoms, os.path.join(work, "water.data"), elements)
    script = f"""units metal
atom_style atomic
atom_modify map array
boundary p p p
read_data water.data
mass * 1.0
pair_style mlip {model}
pair_coeff * * {' '.join(elements)}
compute pe all pe/atom
compute vp all pressure NULL virial
thermo_style custom step pe c_vp[1] c_vp[2] c_vp[3] c_vp[6] c_vp[5] c_vp[4]
thermo_modify format float %.17g
dump d all custom 1 forces.dump id fx fy fz c_pe
dump_modify d sort id format float %.17g
run 0
"""
    with open(os.path.join(work, "in.test"), "w") as f:
        f.write(script)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    done = subprocess.run([lmp, "-in", "in.test", "-log", "log.lammps", "-screen", "none", "-nocite"],
                          cwd=work, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        log = os.path.join(work, "log.lammps")
        tail = open(log).read()[-2000:] if os.path.exists(log) else ""
        sys.exit(f"LAMMPS failed on {model}:\n{tail}{done.stdout}{done.stderr}")
    with open(os.path.join(work, "log.lammps")) as f:
        log = f.read().splitlines()
    row = log[next(k for k, line in enumerate(log) if line.split()[:1] == ["Step"]) + 1].split()
    energy = float(row[1])
    pressure = np.array([float(v) for v in row[2:8]])   # xx yy zz yz xz xy, bar
    table = np.loadtxt(os.path.join(work, "forces.dump"), skiprows=9)
    return energy, table[:, 4], table[:, 1:4], -pressure / NKTV2P_METAL


def relative(a, b):
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))


def check_errors(ops_library, model):
    """Clear errors: a species the model lacks; a missing operators library."""
    calc = MLIPCalculator(model, ops_library=ops_library)
    atoms = triclinic_water()
    atoms[0].symbol = "C"
    atoms.calc = calc
    try:
        atoms.get_potential_energy()
        sys.exit("no error for an element the model lacks")
    except ValueError as error:
        assert "has no species C" in str(error), error
    try:
        MLIPCalculator(model, ops_library=ops_library + ".missing")
        sys.exit("no error for a missing operators library")
    except FileNotFoundError as error:
        assert "does not exist" in str(error), error


def main():
    lmp, ops_library, models = sys.argv[1], sys.argv[2], sys.argv[3:]
    atoms = triclinic_water()
    failed = False
    for model in models:
        calc = MLIPCalculator(model, ops_library=ops_library)
        elements = calc.species
        atoms.calc = calc
        mine = (atoms.get_potential_energy(), atoms.get_potential_energies(), atoms.get_forces(),
                atoms.get_stress())
        with tempfile.TemporaryDirectory() as work:
            theirs = run_lammps(lmp, os.path.abspath(model), atoms, elements, work)
        errors = [relative(m, t) for m, t in zip(mine, theirs)]
        ok = max(errors) < TOLERANCE
        failed |= not ok
        print(f"{os.path.basename(model)} ({calc.metadata['architecture']}): energy {mine[0]:.10f} eV; "
              "relative difference to LAMMPS: energy {:.1e}, per-atom energies {:.1e}, forces {:.1e}, "
              "stress {:.1e} {}".format(*errors, "ok" if ok else "FAILED"))
    check_errors(ops_library, models[0])
    print("errors: unknown species and missing operators library named")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
