#!/usr/bin/env python3
"""Turn a model saved by mace-torch into an mlip model file (model.pt).

    python python/mace_to_mlip.py MACE.model -o model.pt [--mlip-trainer build/bin/mlip-trainer]

MACE.model is what `mace_run_train` saves (a pickled torch module, e.g. MACE_run-123.model or a
foundation model such as MACE-MP / MACE-OFF that you have on disk), or the TorchScript file of its
`create_lammps_model` (*-lammps.pt). The mlip model computes the same function (architecture
`mace`, potentials/src/mace.cpp) and works wherever an mlip model does: pair_style mlip,
mlip-trainer test / deviation, fine-tuning (training.init_from) and the ASE calculator.

Unpickling a mace-torch model needs Python with torch, e3nn and mace-torch (pip install
mace-torch); nothing else of mlip does. The script reads the hyperparameters off the model's
tensors, writes them and the weights next to the output (OUTPUT.spec.json, OUTPUT.weights.pt) and
runs `mlip-trainer import` on them. With --check (default when mlip's ASE calculator and operator
library are found) it then evaluates both models on a small random structure and prints the
largest differences.

Supported: mace-torch's default model (`--model MACE`, ScaleShiftMACE or MACE): one head, Bessel
radial basis without distance transform, a plain first interaction (RealAgnosticInteractionBlock)
and residual ones after it (RealAgnosticResidualInteractionBlock), element-dependent symmetric
contractions with e3nn's (not the reduced) coupling coefficients, no ZBL pair repulsion, no
embeddings of charges or spins. Anything else is refused with the reason.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")  # e3nn 0.4 tables, mace-torch pickles

import torch

SYMBOLS = ("X H He Li Be B C N O F Ne Na Mg Al Si P S Cl Ar K Ca Sc Ti V Cr Mn Fe Co Ni Cu Zn Ga Ge As Se Br Kr "
           "Rb Sr Y Zr Nb Mo Tc Ru Rh Pd Ag Cd In Sn Sb Te I Xe Cs Ba La Ce Pr Nd Pm Sm Eu Gd Tb Dy Ho Er Tm Yb "
           "Lu Hf Ta W Re Os Ir Pt Au Hg Tl Pb Bi Po At Rn Fr Ra Ac Th Pa U Np Pu Am Cm Bk Cf Es Fm Md No Lr Rf "
           "Db Sg Bh Hs Mt Ds Rg Cn Nh Fl Mc Lv Ts Og").split()


class Refused(Exception):
    pass


def kind(module):
    """The class name of a module, pickled or TorchScript."""
    return getattr(module, "original_name", None) or type(module).__name__


def children(module):
    """The modules of a ModuleList, pickled or TorchScript (whose lists do not iterate in Python)."""
    return [m for _, m in module.named_children()]


def load(path):
    if not os.path.isfile(path):
        raise Refused(f"{path} does not exist")
    try:
        model = torch.jit.load(path, map_location="cpu")
    except Exception:
        try:
            model = torch.load(path, map_location="cpu", weights_only=False)
        except ModuleNotFoundError as e:
            raise Refused(f"{path}: unpickling needs {e.name} (pip install mace-torch)") from e
        except Exception as e:
            raise Refused(f"{path}: neither a TorchScript file nor a pickled torch module ({e})") from e
    # create_lammps_model wraps the model
    if not hasattr(model, "interactions") and hasattr(model, "model"):
        model = model.model
    if not hasattr(model, "interactions"):
        raise Refused(f"{path}: not a mace-torch model (no interaction blocks)")
    return model


def tensors(model):
    return {k: v.detach().to(torch.float64) for k, v in model.state_dict().items()}


def check_supported(model, sd):
    name = kind(model)
    if name not in ("MACE", "ScaleShiftMACE"):
        raise Refused(f"model class {name}: only MACE and ScaleShiftMACE (mace-torch's --model MACE) are supported")
    blocks = [kind(m) for m in children(model.interactions)]
    if blocks[0] != "RealAgnosticInteractionBlock" or any(b != "RealAgnosticResidualInteractionBlock" for b in blocks[1:]):
        raise Refused(f"interaction blocks {blocks}: supported is RealAgnosticInteractionBlock first, then "
                      "RealAgnosticResidualInteractionBlock (mace-torch's --model MACE)")
    for attr, why in (("pair_repulsion_fn", "ZBL pair repulsion"), ("joint_embedding", "charge/spin embeddings"),
                      ("distance_transform", "a distance transform")):
        if hasattr(model, attr) or hasattr(model.radial_embedding, attr):
            raise Refused(f"the model uses {why}, which mlip's mace does not have")
    check_coupling(sd)
    if getattr(model, "use_agnostic_product", False):
        raise Refused("the model uses an element-agnostic product")
    if kind(model.radial_embedding.bessel_fn) != "BesselBasis":
        raise Refused(f"radial basis {kind(model.radial_embedding.bessel_fn)}: only BesselBasis is supported")
    e0 = sd["atomic_energies_fn.atomic_energies"]
    if e0.dim() > 1 and min(e0.shape) > 1:
        raise Refused("the model has several heads; mlip imports single-head models")
    for t in range(len(children(model.interactions))):
        if f"interactions.{t}.linear_up.bias" in sd and sd[f"interactions.{t}.linear_up.bias"].numel():
            raise Refused("linear layers with biases are not supported")


def check_coupling(sd):
    """The symmetric contractions' coefficients must be e3nn's (mace-torch's default), not the
    reduced ones of cuequivariance (use_reduced_cg with cuequivariance installed): compared with
    mace-torch's own e3nn computation."""
    from e3nn import o3
    from mace.tools.cg import U_matrix_real
    u1 = sd["products.0.symmetric_contractions.contractions.0.U_matrix_1"]
    max_ell = int(round(u1.shape[-2] ** 0.5)) - 1
    coupling = o3.Irreps("+".join(f"{l}{'e' if l % 2 == 0 else 'o'}" for l in range(max_ell + 1)))
    for key, U in sd.items():
        if ".U_matrix_" not in key:
            continue
        nu = int(key.rsplit("_", 1)[1])
        L = (U.shape[0] - 1) // 2 if U.dim() == nu + 2 else 0
        ref = U_matrix_real(coupling, o3.Irreps(f"{L}{'e' if L % 2 == 0 else 'o'}"), nu, use_cueq_cg=False,
                            dtype=torch.float64)[-1]
        if ref.shape != U.shape or not torch.allclose(ref, U, rtol=0, atol=1e-12):
            raise Refused(f"{key}: the coupling coefficients are not e3nn's (a model with reduced, cuequivariance "
                          "coefficients?); mlip computes e3nn's")


def hyperparameters(model, sd):
    Z = [int(z) for z in sd["atomic_numbers"].tolist()]
    N = len(Z)
    C = sd["node_embedding.linear.weight"].numel() // N
    layers = len(children(model.interactions))
    contractions = [k for k in sd if k.startswith("products.0.symmetric_contractions.contractions.")
                    and k.endswith(".U_matrix_1")]
    u1 = sd["products.0.symmetric_contractions.contractions.0.U_matrix_1"]
    D = u1.shape[-2]
    max_ell = int(round(D ** 0.5)) - 1
    correlation = [len([k for k in sd if k.startswith(f"products.{t}.symmetric_contractions.contractions.0.U_matrix_")])
                   for t in range(layers)]
    if len(set(correlation)) != 1:
        raise Refused(f"correlation differs between layers ({correlation}); mlip's mace uses one")
    mlp = [sd[f"interactions.0.conv_tp_weights.layer{j}.weight"].shape
           for j in range(len([k for k in sd if k.startswith("interactions.0.conv_tp_weights.layer")]))]
    hp = {
        "num_channels": C,
        "max_L": (len(contractions) - 1) if layers > 1 else 0,
        "max_ell": max_ell,
        "correlation": correlation[0],
        "num_interactions": layers,
        "num_radial_basis": sd["radial_embedding.bessel_fn.bessel_weights"].numel(),
        "num_cutoff_basis": int(sd["radial_embedding.cutoff_fn.p"].item()),
        "radial_MLP": [int(s[1]) for s in mlp[:-1]],
        "avg_num_neighbors": float(children(model.interactions)[0].avg_num_neighbors),
    }
    if layers > 1:
        hp["MLP_irreps"] = f"{sd[f'readouts.{layers - 1}.linear_2.weight'].numel()}x0e"
    for block in children(model.interactions):
        if float(block.avg_num_neighbors) != hp["avg_num_neighbors"]:
            raise Refused("avg_num_neighbors differs between layers")
    spec = {
        "architecture": "mace",
        "species": [SYMBOLS[z] for z in Z],
        "cutoff": float(sd["r_max"].item()),
        "dtype": "float64",
        "hyperparameters": hp,
    }
    return spec


def weights(model, sd, spec):
    hp = spec["hyperparameters"]
    layers, corr, N = hp["num_interactions"], hp["correlation"], len(spec["species"])
    w = {"embedding_w": sd["node_embedding.linear.weight"]}
    for t in range(layers):
        p, i, pr = f"l{t}_", f"interactions.{t}.", f"products.{t}."
        w[p + "up_w"] = sd[i + "linear_up.weight"]
        j = 0
        while f"{i}conv_tp_weights.layer{j}.weight" in sd:
            w[f"{p}mlp{j}_w"] = sd[f"{i}conv_tp_weights.layer{j}.weight"]
            j += 1
        w[p + "linear_w"] = sd[i + "linear.weight"]
        w[p + "skip_w"] = sd[i + "skip_tp.weight"]
        w[p + "prod_w"] = sd[pr + "linear.weight"]
        L_out = [0] if t == layers - 1 else list(range(hp["max_L"] + 1))
        for c, L in enumerate(L_out):
            q = f"{pr}symmetric_contractions.contractions.{c}."
            for nu in range(corr, 0, -1):
                key = q + "weights_max" if nu == corr else q + f"weights.{corr - 1 - nu}"
                U = sd[q + f"U_matrix_{nu}"]
                if not torch.any(U != 0):
                    continue  # a coupling with no path: mlip has no weights there
                w[f"{p}sc{L}_w{nu}"] = sd[key]
        if t == layers - 1 and layers > 1:
            w[p + "ro1_w"] = sd[f"readouts.{t}.linear_1.weight"]
            w[p + "ro2_w"] = sd[f"readouts.{t}.linear_2.weight"]
        else:
            w[p + "ro_w"] = sd[f"readouts.{t}.linear.weight"]
    e0 = sd["atomic_energies_fn.atomic_energies"].reshape(-1)
    scale = sd.get("scale_shift.scale", torch.tensor(1.0)).reshape(-1)[0]
    shift = sd.get("scale_shift.shift", torch.tensor(0.0)).reshape(-1)[0]
    w["energy_shift"] = e0 + shift
    w["energy_scale"] = torch.full((N,), float(scale), dtype=torch.float64)
    w["avg_num_neighbors"] = torch.tensor([hp["avg_num_neighbors"]], dtype=torch.float64)
    return {k: v.contiguous() for k, v in w.items()}


def find_trainer(given):
    if given:
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (shutil.which("mlip-trainer"), os.path.join(here, "..", "build", "bin", "mlip-trainer")):
        if candidate and os.path.isfile(candidate):
            return candidate
    raise Refused("mlip-trainer not found: give --mlip-trainer PATH")


def check(mace_path, mlip_path, ops, species):
    """Both models on one random periodic structure: largest energy and force differences."""
    import numpy as np
    from ase import Atoms
    from mace.calculators import MACECalculator
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mlip_ase import MLIPCalculator
    rng = np.random.default_rng(0)
    n = 12
    atoms = Atoms(symbols=[species[k % len(species)] for k in range(n)], cell=np.eye(3) * 6.0, pbc=True)
    atoms.positions = rng.uniform(0, 6.0, (n, 3))
    ref = atoms.copy()
    ref.calc = MACECalculator(model_paths=mace_path, device="cpu", default_dtype="float64")
    ours = atoms.copy()
    ours.calc = MLIPCalculator(mlip_path, ops_library=ops)
    de = abs(ref.get_potential_energy() - ours.get_potential_energy())
    df = float(np.abs(ref.get_forces() - ours.get_forces()).max())
    return de, df


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="mace-torch model (.model, or the *-lammps.pt of create_lammps_model)")
    ap.add_argument("-o", "--output", default="model.pt", help="mlip model file to write")
    ap.add_argument("--mlip-trainer", help="mlip-trainer executable (default: on PATH or build/bin)")
    ap.add_argument("--ops", help="libmlip_ops.so, for --check (default: build/lib)")
    ap.add_argument("--check", action=argparse.BooleanOptionalAction, default=None,
                    help="compare both models on a random structure (default: when possible)")
    args = ap.parse_args(argv)
    try:
        torch.set_default_dtype(torch.float64)
        model = load(args.model)
        sd = tensors(model)
        check_supported(model, sd)
        spec = hyperparameters(model, sd)
        w = weights(model, sd, spec)
        spec_path, weights_path = args.output + ".spec.json", args.output + ".weights.pt"
        with open(spec_path, "w") as f:
            json.dump(spec, f, indent=1)
        torch.save(w, weights_path)
        trainer = find_trainer(args.mlip_trainer)
        run = subprocess.run([trainer, "import", spec_path, weights_path, "-o", args.output],
                             capture_output=True, text=True)
        sys.stdout.write(run.stdout)
        if run.returncode != 0:
            raise Refused(f"mlip-trainer import failed: {run.stderr.strip()}")
    except Refused as e:
        print(f"mace_to_mlip: {e}", file=sys.stderr)
        return 1
    hp = spec["hyperparameters"]
    print(f"{args.model} -> {args.output}: mace, species {' '.join(spec['species'])}, r_max {spec['cutoff']} A, "
          f"{hp['num_channels']} channels, max_L {hp['max_L']}, max_ell {hp['max_ell']}, correlation "
          f"{hp['correlation']}, {hp['num_interactions']} interactions")
    ops = args.ops or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "lib", "libmlip_ops.so")
    if args.check or (args.check is None and os.path.isfile(ops)):
        de, df = check(args.model, args.output, ops, spec["species"])
        print(f"check on a random 12-atom periodic structure: |dE| {de:.3g} eV, max |dF| {df:.3g} eV/A")
    return 0


if __name__ == "__main__":
    sys.exit(main())
