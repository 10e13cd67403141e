"""Same training: optimiser steps of mlip-trainer from imported weights equal mace-torch's own.

Usage: PYTHON mace_training_step.py MLIP_TRAINER OPS_LIBRARY WORK_DIR

A MACE model made by mace-torch (random weights, float64) is imported by python/mace_to_mlip.py.
Both codes then take two optimiser steps on the same batch of four 48-atom water frames (energies
and forces), with mace-torch's loss (`WeightedEnergyForcesLoss`, energy weight 1, forces weight
100) and optimiser (Adam with AMSGrad, lr 0.01): mace-torch in Python, as its `train` loop does it
(model in training mode, forces by autograd with a graph, loss.backward(), optimizer.step()), and
`mlip-trainer train` with `init_from` the imported model, the same loss prefactors, Adam with
`amsgrad: true`, a constant learning rate and `refit_energy_shift: false`. After each step every
weight of mlip's checkpoint equals the mace-torch weight it was imported from to 1e-8 relative
(largest difference over the largest value, per tensor). Weight decay is 0 on both sides
(mace-torch's default 5e-7 applies to some of its parameter groups only; mlip's applies to all).
mace-torch is the oracle: without it this test fails (scripts/install-deps.sh installs it).
"""
import glob
import json
import os
import shutil
import subprocess
import sys

os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
try:
    import numpy as np
    import torch
    from ase.io import read
    from mace import data as mace_data
    from mace.modules.loss import WeightedEnergyForcesLoss
    from mace.tools import AtomicNumberTable, torch_geometric
except ImportError as error:
    print(f"FAILED: {error}: mace-torch is this test's oracle (scripts/install-deps.sh installs it into the torch venv)")
    sys.exit(1)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)
import mace_to_mlip  # noqa: E402
from mace_import import make_model  # noqa: E402

TOLERANCE = 1e-8
STEPS = 2
LR = 0.01
ENERGY_WEIGHT, FORCES_WEIGHT = 1.0, 100.0
SHAPES = [(1, 3, 2), (2, 2, 2)]  # (max_L, correlation, num_interactions): the default shape and an l = 2 one


def frames(count=4):
    """Water frames (48 atoms, periodic) with displaced atoms and made-up labels."""
    rng = np.random.default_rng(7)
    base = read(os.path.join(ROOT, "tests/data/libtorch-1.13/water.xyz"))[:48]
    out = []
    for _ in range(count):
        atoms = base.copy()
        atoms.positions += rng.normal(0, 0.05, atoms.positions.shape)
        atoms.info["REF_energy"] = float(rng.normal(-300.0, 5.0))
        atoms.arrays["REF_forces"] = rng.normal(0, 1.0, atoms.positions.shape)
        out.append(atoms)
    return out


def write_extxyz(path, atoms_list):
    """mlip's reader: `energy=` on the comment line, a `forces` column."""
    with open(path, "w") as f:
        for a in atoms_list:
            cell = " ".join(f"{x:.17g}" for x in a.cell.array.reshape(-1))
            f.write(f"{len(a)}\nLattice=\"{cell}\" Properties=species:S:1:pos:R:3:forces:R:3 "
                    f"energy={a.info['REF_energy']:.17g} pbc=\"T T T\"\n")
            for s, p, g in zip(a.get_chemical_symbols(), a.positions, a.arrays["REF_forces"]):
                f.write(f"{s} " + " ".join(f"{x:.17g}" for x in (*p, *g)) + "\n")


def mace_steps(model, atoms_list):
    """mace-torch's training step, STEPS times on one batch: the weights (mlip's names) after each."""
    keys = mace_data.KeySpecification(info_keys={"energy": "REF_energy"}, arrays_keys={"forces": "REF_forces"})
    z_table = AtomicNumberTable([1, 8])
    graphs = [mace_data.AtomicData.from_config(mace_data.config_from_atoms(a, key_specification=keys),
                                               z_table=z_table, cutoff=float(model.r_max)) for a in atoms_list]
    batch = torch_geometric.Batch.from_data_list(graphs)
    loss_fn = WeightedEnergyForcesLoss(energy_weight=ENERGY_WEIGHT, forces_weight=FORCES_WEIGHT)
    optimizer = torch.optim.Adam(model.parameters(), lr=LR, amsgrad=True, weight_decay=0.0)
    model.train()
    after = []
    for _ in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        out = model(batch.to_dict(), training=True, compute_force=True)
        loss = loss_fn(pred=out, ref=batch)
        loss.backward()
        optimizer.step()
        sd = mace_to_mlip.tensors(model)
        after.append({k: v.detach().clone() for k, v in
                      mace_to_mlip.weights(model, sd, mace_to_mlip.hyperparameters(model, sd)).items()})
    return after


def mlip_steps(trainer, spec, start, data, work):
    """mlip-trainer, init_from the imported model: its weights after each step (one step per epoch)."""
    hp = spec["hyperparameters"]
    config = os.path.join(work, "config.yaml")
    with open(config, "w") as f:
        f.write(f"""model:
  architecture: mace
  species: [{', '.join(spec['species'])}]
  cutoff: {spec['cutoff']!r}
  dtype: float64
  hyperparameters: {json.dumps(hp)}
data:
  train: [{data}]
  validation: [{data}]
  batch: {{frames: 4}}
training:
  epochs: {STEPS}
  init_from: {start}
  refit_energy_shift: false
  optimizer: {{type: adam, lr: {LR}, amsgrad: true, weight_decay: 0.0}}
  lr_schedule: {{type: constant}}
  loss:
    energy: {{start: {ENERGY_WEIGHT}, limit: {ENERGY_WEIGHT}}}
    forces: {{start: {FORCES_WEIGHT}, limit: {FORCES_WEIGHT}}}
output:
  dir: {work}/run
""")
    run = subprocess.run([trainer, "train", config], capture_output=True, text=True)
    if run.returncode != 0:
        raise RuntimeError(f"mlip-trainer train failed:\n{run.stdout}\n{run.stderr}")
    after = []
    for epoch in range(1, STEPS + 1):
        [path] = glob.glob(os.path.join(work, "run", "**", f"epoch-{epoch:06d}", "model.pt"), recursive=True)
        module = torch.jit.load(path)
        after.append({name: p.detach().clone() for name, p in module.named_parameters()})
    return after


def compare(tag, step, ours, ref):
    worst, name_worst = 0.0, ""
    for name, value in ours.items():
        if name not in ref:
            raise RuntimeError(f"{tag}: mlip parameter {name} has no mace-torch counterpart")
        r = ref[name].reshape(value.shape)
        rel = float((value - r).abs().max() / r.abs().max().clamp_min(1e-300))
        if rel > worst:
            worst, name_worst = rel, name
    print(f"{tag} step {step}: {len(ours)} weight tensors, largest relative difference {worst:.2e} ({name_worst})")
    return worst <= TOLERANCE


def main():
    trainer, ops, work = sys.argv[1:4]
    torch.ops.load_library(ops)
    torch.set_default_dtype(torch.float64)
    ok = True
    for max_L, corr, layers in SHAPES:
        tag = f"L{max_L}-c{corr}-t{layers}"
        here = os.path.join(work, tag)
        shutil.rmtree(here, ignore_errors=True)   # a run folder of an earlier ctest run is not resumed
        os.makedirs(here)
        src, start = os.path.join(here, "mace.model"), os.path.join(here, "start.pt")
        model = make_model(max_L, corr, layers, elements=(1, 8))
        torch.save(model, src)
        if mace_to_mlip.main([src, "-o", start, "--mlip-trainer", trainer, "--no-check"]) != 0:
            print(f"FAIL {tag}: import")
            ok = False
            continue
        spec = mace_to_mlip.hyperparameters(model, mace_to_mlip.tensors(model))
        atoms_list = frames()
        data = os.path.join(here, "frames.xyz")
        write_extxyz(data, atoms_list)
        initial = {k: v.clone() for k, v in mace_to_mlip.weights(model, mace_to_mlip.tensors(model), spec).items()}
        ours = mlip_steps(trainer, spec, start, data, here)
        ref = mace_steps(model, atoms_list)
        moved = max(float((ref[-1][k] - v).abs().max()) for k, v in initial.items() if k in ours[-1])
        if not moved > 1e-4:
            print(f"FAIL {tag}: the steps did not move the weights (largest change {moved:.3g})")
            ok = False
        for step in range(STEPS):
            if not compare(tag, step + 1, ours[step], ref[step]):
                print(f"FAIL {tag} step {step + 1}: above {TOLERANCE}")
                ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
