#!/usr/bin/env python3
"""Turn a model saved by mace-torch into an mlip model file (model.pt).

    python python/mace_to_mlip.py MACE.model -o model.pt [--head NAME] [--all-heads] [--mlip-trainer build/bin/mlip-trainer]

MACE.model is what `mace_run_train` saves (a pickled torch module, e.g. MACE_run-123.model or a
foundation model such as MACE-MP-0 / MPA-0 / OMAT-0 / OFF that you have on disk), or the
TorchScript file of its `create_lammps_model` (*-lammps.pt). The mlip model computes the same
function (architecture `mace`, potentials/src/mace.cpp) and works wherever an mlip model does:
pair_style mlip, mlip-trainer test / deviation, fine-tuning (training.init_from), the ASE calculator.

Unpickling a mace-torch model needs Python with torch, e3nn and mace-torch (pip install
mace-torch); nothing else of mlip does. The script reads every hyperparameter that changes the
model's function off the model, and either reproduces it or refuses the model in one line naming
it. It writes the hyperparameters and weights next to the output (OUTPUT.spec.json,
OUTPUT.weights.pt) and runs `mlip-trainer import` on them. Then (unless --no-check) it evaluates
both models on four structures (a molecule with a close pair, a periodic box, a triclinic cell, a
small periodic cell; up to four of the model's elements) and compares energies, forces and stress:
in float64 to 1e-8 relative; a float32 model against mace-torch in float64, within 10x mace-torch's
own float32 error. Beyond that it says so and exits 2 (the model file stays, for inspection).

Reproduced: ScaleShiftMACE and MACE; the interaction blocks RealAgnostic{,Residual,Density,
DensityResidual,ResidualNonLinear}InteractionBlock first and RealAgnostic{Residual,DensityResidual,
ResidualNonLinear}InteractionBlock after (the non-linear one: MACE-MH's); edge irreps (the same
channels for each l); the gates silu, tanh, abs and None; Bessel frequencies as the model has them; the Agnesi
distance transform; ZBL pair repulsion; apply_cutoff; element-agnostic products; the last readout
only; one head of a multi-head model (--head; default as mace-torch's calculator: the only head,
else the one named "default"), or all of them (--all-heads: the model's forward() gives --head's
energies, and fine-tuning keeps the heads by name); float32 kept as float32 (--dtype to change). Refused, each naming
what: other model classes, interaction blocks or readouts, radial bases other than Bessel, other
distance transforms, charge/spin embeddings, other edge irreps, SO(3) harmonics, correlation that differs
between layers, the reduced (cuequivariance) coupling coefficients, biases.
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
NONLINEAR = "RealAgnosticResidualNonLinearInteractionBlock"  # MACE-MH's
FIRST_BLOCKS = ("RealAgnosticInteractionBlock", "RealAgnosticResidualInteractionBlock",
                "RealAgnosticDensityInteractionBlock", "RealAgnosticDensityResidualInteractionBlock", NONLINEAR)
LATER_BLOCKS = ("RealAgnosticResidualInteractionBlock", "RealAgnosticDensityResidualInteractionBlock", NONLINEAR)
# e3nn's normalize2mom constants of the non-linear block's gate (SiLU scalars, sigmoid gates).
NONLINEAR_GATE = (1.6791767923989418, 1.8467055342154763)
# e3nn's normalize2mom constants of mace-torch's gates (potentials/src/mace_radial.cpp has the same).
GATES = {"silu": (torch.nn.functional.silu, 1.6791767923989418), "tanh": (torch.tanh, 1.5937334472592695),
         "abs": (torch.abs, 1.001110600838467), "None": (lambda x: x, 1.0)}
TOLERANCE = {"float64": 1e-8}


class Refused(Exception):
    pass


class CheckFailed(Exception):
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


def model_dtype(model):
    kinds = {p.dtype for p in model.parameters()}
    if kinds == {torch.float32}:
        return "float32"
    if kinds == {torch.float64}:
        return "float64"
    raise Refused(f"parameters of dtypes {sorted(str(k) for k in kinds)}: expected all float32 or all float64")


def flag(model, name, default):
    value = getattr(model, name, default)
    return default if value is None else value


def check_supported(model, sd):
    """Everything mlip does not compute, refused in one line naming it."""
    name = kind(model)
    if name not in ("MACE", "ScaleShiftMACE"):
        raise Refused(f"model class {name}: only MACE and ScaleShiftMACE are supported")
    blocks = [kind(m) for m in children(model.interactions)]
    if blocks[0] not in FIRST_BLOCKS or any(b not in LATER_BLOCKS for b in blocks[1:]):
        raise Refused(f"interaction blocks {blocks}: mlip has {', '.join(FIRST_BLOCKS)} first and "
                      f"{', '.join(LATER_BLOCKS)} after")
    if hasattr(model, "joint_embedding") or hasattr(model, "embedding_readout"):
        raise Refused("the model embeds charges/spins (embedding_specs), which mlip's mace does not have")
    if flag(model, "use_so3", False):
        raise Refused("the model uses SO(3) (all-even) spherical harmonics (use_so3), which mlip's mace does not have")
    products = [kind(m) for m in children(model.products)]
    if any(p != "EquivariantProductBasisBlock" for p in products):
        raise Refused(f"product blocks {products}: mlip has EquivariantProductBasisBlock")
    edge_irreps(model)
    for t, block in enumerate(children(model.interactions)):
        if kind(block) == NONLINEAR:
            check_nonlinear(block, sd, f"interactions.{t}.")
    readouts = [kind(m) for m in children(model.readouts)]
    if any(r not in ("LinearReadoutBlock", "NonLinearReadoutBlock") for r in readouts):
        raise Refused(f"readout blocks {readouts}: mlip has LinearReadoutBlock and NonLinearReadoutBlock")
    radial = model.radial_embedding
    if kind(radial.bessel_fn) != "BesselBasis":
        raise Refused(f"radial basis {kind(radial.bessel_fn)}: only BesselBasis is supported")
    if hasattr(radial, "distance_transform") and kind(radial.distance_transform) != "AgnesiTransform":
        raise Refused(f"distance transform {kind(radial.distance_transform)}: mlip has AgnesiTransform")
    for key, value in sd.items():  # e3nn Linear layers' biases (RadialMLP's torch Linear layers have theirs)
        if key.endswith(".bias") and value.numel() and ".net." not in key and not key.startswith("scale_shift"):
            raise Refused(f"{key}: linear layers with biases are not supported")
    if len(readouts) < len(blocks) and not flag(model, "use_last_readout_only", False):
        raise Refused(f"{len(readouts)} readouts for {len(blocks)} interactions")
    check_coupling(sd, model_dtype(model))


def edge_irreps(model):
    """mace-torch's edge_irreps as mlip writes them ("Cx0e+Cx1o+..."), or None; other forms refused."""
    irreps = flag(model, "edge_irreps", None)
    if irreps is None:
        return None
    terms = [(mul, ir.l, ir.p) for mul, ir in irreps]
    if not terms or any(l != k or p != (-1) ** l or mul != terms[0][0] for k, (mul, l, p) in enumerate(terms)):
        raise Refused(f"edge_irreps {irreps}: mlip's mace takes the same channels for each l from 0, natural parity")
    return "+".join(f"{mul}x{l}{'e' if p == 1 else 'o'}" for mul, l, p in terms)


def check_nonlinear(block, sd, key):
    """What a non-linear block fixes in code and mlip assumes: its gate, LayerNorms, density net."""
    gate = getattr(block, "equivariant_nonlin", None)
    csts = (getattr(gate, "_scalar_cst", None), getattr(gate, "_gate_cst", None))
    if csts != NONLINEAR_GATE:
        raise Refused(f"{key[:-1]}: the non-linear block's gate is not mace-torch's SiLU/sigmoid ({csts})")
    for net in ("conv_tp_weights", "density_fn"):
        for m in children(getattr(block, net).net):
            if kind(m) == "LayerNorm" and (float(m.eps) != 1e-5 or not m.elementwise_affine):
                raise Refused(f"{key}{net}: a LayerNorm other than mace-torch's (eps 1e-5, affine)")
    if tuple(sd[key + "density_fn.net.0.weight"].shape[:1]) != (64,) or key + "density_fn.net.4.weight" in sd:
        raise Refused(f"{key}density_fn: not mace-torch's one hidden layer of 64")


def radial_mlp_keys(sd, key):
    """The Linear layers of a block's radial net, in order: e3nn's layer{j} or RadialMLP's net.{k}."""
    if f"{key}layer0.weight" in sd:
        return [f"{key}layer{j}" for j in range(len([k for k in sd if k.startswith(key + "layer")]))]
    idx = sorted(int(k[len(key) + 4:-7]) for k in sd if k.startswith(key + "net.") and k.endswith(".weight")
                 and sd[k].dim() == 2)
    return [f"{key}net.{k}" for k in idx]


def check_coupling(sd, dtype):
    """The symmetric contractions' coefficients must be e3nn's (mace-torch's default), not the
    reduced ones of cuequivariance (use_reduced_cg with cuequivariance installed): compared with
    mace-torch's own e3nn computation, to the model's rounding."""
    from e3nn import o3
    from mace.tools.cg import U_matrix_real
    u1 = sd["products.0.symmetric_contractions.contractions.0.U_matrix_1"]
    max_ell = int(round(u1.shape[-2] ** 0.5)) - 1
    coupling = o3.Irreps("+".join(f"{l}{'e' if l % 2 == 0 else 'o'}" for l in range(max_ell + 1)))
    atol = 1e-12 if dtype == "float64" else 1e-6
    for key, U in sd.items():
        if ".U_matrix_" not in key:
            continue
        nu = int(key.rsplit("_", 1)[1])
        L = (U.shape[0] - 1) // 2 if U.dim() == nu + 2 else 0
        ref = U_matrix_real(coupling, o3.Irreps(f"{L}{'e' if L % 2 == 0 else 'o'}"), nu, use_cueq_cg=False,
                            dtype=torch.float64)[-1]
        if ref.shape != U.shape or not torch.allclose(ref, U, rtol=0, atol=atol):
            raise Refused(f"{key}: the coupling coefficients are not e3nn's (a model with reduced, cuequivariance "
                          "coefficients?); mlip computes e3nn's")


def read_gate(model, width):
    """The last readout's nonlinearity, recognised by evaluating it (pickled or TorchScript)."""
    act = children(model.readouts)[-1].non_linearity
    x = torch.linspace(-3, 3, 13, dtype=next(model.parameters()).dtype).unsqueeze(1).repeat(1, width)
    try:
        y = act(x).to(torch.float64)
    except Exception as e:  # noqa: BLE001 - any failure is a refusal
        raise Refused(f"the readout's gate could not be evaluated ({e})") from e
    tol = 1e-12 if x.dtype == torch.float64 else 1e-5
    for name, (f, cst) in GATES.items():
        if torch.allclose(y, f(x.to(torch.float64)) * cst, rtol=0, atol=tol):
            return name
    raise Refused("the readout's gate is none of mace-torch's silu, tanh, abs, None")


def read_radial(model, sd, hp):
    """Bessel frequencies, Agnesi transform, apply_cutoff, ZBL: mace_radial.h's hyperparameters."""
    import ase.data
    radial = model.radial_embedding
    r_max = float(sd["r_max"].item())
    k = sd["radial_embedding.bessel_fn.bessel_weights"]
    default = torch.arange(1, k.numel() + 1, dtype=torch.float64) * (3.141592653589793 / r_max)
    if not torch.allclose(k, default, rtol=1e-12 if model_dtype(model) == "float64" else 1e-6, atol=0):
        hp["bessel_weights"] = k.tolist()  # trained, or not mace-torch's n pi / r_max
    prefactor = float(sd["radial_embedding.bessel_fn.prefactor"].item())
    if abs(prefactor - (2.0 / r_max) ** 0.5) > 1e-6 * prefactor:
        raise Refused(f"the Bessel prefactor {prefactor} is not sqrt(2 / r_max)")
    radii = torch.tensor(ase.data.covalent_radii, dtype=torch.float64)
    if hasattr(radial, "distance_transform"):
        hp["distance_transform"] = "Agnesi"
        hp["agnesi"] = {k: float(sd[f"radial_embedding.distance_transform.{k}"].item()) for k in ("q", "p", "a")}
        check_radii(sd["radial_embedding.distance_transform.covalent_radii"], radii, "Agnesi")
    hp["apply_cutoff"] = bool(flag(radial, "apply_cutoff", True))
    if hasattr(model, "pair_repulsion_fn"):
        hp["pair_repulsion"] = True
        c = sd["pair_repulsion_fn.c"]
        if not torch.allclose(c, torch.tensor([0.1818, 0.5099, 0.2802, 0.02817], dtype=torch.float64), atol=1e-6):
            raise Refused(f"ZBL coefficients {c.tolist()} are not mace-torch's")
        if int(sd["pair_repulsion_fn.p"].item()) != hp["num_cutoff_basis"]:
            raise Refused("the ZBL envelope's order differs from num_polynomial_cutoff")
        hp["zbl"] = {"a_exp": float(sd["pair_repulsion_fn.a_exp"].item()),
                     "a_prefactor": float(sd["pair_repulsion_fn.a_prefactor"].item())}
        check_radii(sd["pair_repulsion_fn.covalent_radii"], radii, "ZBL")


def check_radii(theirs, ours, what):
    if theirs.shape != ours.shape or not torch.allclose(theirs, ours, atol=1e-6):
        raise Refused(f"the {what} covalent radii are not ASE's (mlip uses ase.data.covalent_radii)")


def heads_of(model):
    return list(getattr(model, "heads", None) or ["Default"])


def choose_head(model, head):
    """The head's index: the one asked for, the only one, or the one named "default" (as mace-torch's
    calculator chooses)."""
    heads = heads_of(model)
    if head is not None:
        if head not in heads:
            raise Refused(f"head '{head}' is not one of the model's heads {heads}")
        return heads.index(head)
    if len(heads) == 1:
        return 0
    default = [k for k, h in enumerate(heads) if h.lower() == "default"]
    if not default:
        raise Refused(f"the model has heads {heads} and none is 'default': choose one with --head")
    return default[0]


def hyperparameters(model, sd, dtype=None):
    Z = [int(z) for z in sd["atomic_numbers"].tolist()]
    N = len(Z)
    C = sd["node_embedding.linear.weight"].numel() // N
    blocks = children(model.interactions)
    layers = len(blocks)
    H = len(heads_of(model))
    contractions = [k for k in sd if k.startswith("products.0.symmetric_contractions.contractions.")
                    and k.endswith(".U_matrix_1")]
    u1 = sd["products.0.symmetric_contractions.contractions.0.U_matrix_1"]
    max_ell = int(round(u1.shape[-2] ** 0.5)) - 1
    correlation = [len([k for k in sd if k.startswith(f"products.{t}.symmetric_contractions.contractions.0.U_matrix_")])
                   for t in range(layers)]
    if len(set(correlation)) != 1:
        raise Refused(f"correlation differs between layers ({correlation}); mlip's mace uses one")
    mlp = [sd[k + ".weight"].shape for k in radial_mlp_keys(sd, "interactions.0.conv_tp_weights.")]
    nonlinear = kind(blocks[0]) == NONLINEAR  # torch's (out, in) layout; e3nn's (in, out)
    hp = {
        "num_channels": C,
        "max_L": (len(contractions) - 1) if layers > 1 else 0,
        "max_ell": max_ell,
        "correlation": correlation[0],
        "num_interactions": layers,
        "num_radial_basis": sd["radial_embedding.bessel_fn.bessel_weights"].numel(),
        "num_cutoff_basis": int(sd["radial_embedding.cutoff_fn.p"].item()),
        "radial_MLP": [int(s[0] if nonlinear else s[1]) for s in mlp[:-1]],
        "avg_num_neighbors": float(blocks[0].avg_num_neighbors),
        "interaction_first": kind(blocks[0]),
    }
    edge = edge_irreps(model)
    if edge:
        hp["edge_irreps"] = edge
        hp["use_edge_irreps_first"] = bool(flag(model, "use_edge_irreps_first", False))
    if layers > 1:
        hp["interaction"] = kind(blocks[1])
        width = sd[f"readouts.{len(children(model.readouts)) - 1}.linear_2.weight"].numel() // H
        hp["MLP_irreps"] = f"{width // H}x0e"
        hp["gate"] = read_gate(model, width)
    for block in blocks:
        if float(block.avg_num_neighbors) != hp["avg_num_neighbors"]:
            raise Refused("avg_num_neighbors differs between layers")
    read_radial(model, sd, hp)
    return {"architecture": "mace", "species": [SYMBOLS[z] for z in Z], "cutoff": float(sd["r_max"].item()),
            "dtype": dtype or model_dtype(model), "hyperparameters": hp}


def readout_weights(model, sd, spec, head, w):
    """The readouts of one head: e3nn Linear layouts (C, H) and (C, H M), (H M, H); the last
    one's hidden units of the other heads are masked out in mace-torch (mask_head), and its
    fan-in normalisation is over all H M units (hence 1/sqrt(H) on the head's M)."""
    hp = spec["hyperparameters"]
    layers, C, H = hp["num_interactions"], hp["num_channels"], len(heads_of(model))
    last_only = flag(model, "use_last_readout_only", False)
    for t in range(layers):
        p = f"l{t}_"
        r = (0 if last_only else t)
        if t == layers - 1 and layers > 1:
            M = int(hp["MLP_irreps"][:-3])
            w1 = sd[f"readouts.{r}.linear_1.weight"].reshape(C, H * M)
            w2 = sd[f"readouts.{r}.linear_2.weight"].reshape(H * M, H)
            w[p + "ro1_w"] = w1[:, head * M:(head + 1) * M].reshape(-1)
            w[p + "ro2_w"] = w2[head * M:(head + 1) * M, head] / H ** 0.5
        elif last_only:
            w[p + "ro_w"] = torch.zeros(C, dtype=torch.float64)  # no readout here
        else:
            w[p + "ro_w"] = sd[f"readouts.{t}.linear.weight"].reshape(C, H)[:, head].contiguous()
    e0 = sd["atomic_energies_fn.atomic_energies"]
    e0 = e0[head] if e0.dim() == 2 else e0.reshape(-1)
    scale = sd.get("scale_shift.scale", torch.tensor(1.0)).reshape(-1)
    shift = sd.get("scale_shift.shift", torch.tensor(0.0)).reshape(-1)
    scale, shift = scale[head if scale.numel() > 1 else 0], shift[head if shift.numel() > 1 else 0]
    w["energy_shift"] = e0 + shift
    w["energy_scale"] = torch.full((len(spec["species"]),), float(scale), dtype=torch.float64)


def head_weights(model, sd, spec, heads, w):
    """The readouts and energy buffers of `heads` (indices): one head's as they are, several
    stacked (mlip's multi-head layouts: readouts (heads, ...), energy buffers (species, heads))."""
    per = []
    for h in heads:
        one = {}
        readout_weights(model, sd, spec, h, one)
        per.append(one)
    if "heads" not in spec["hyperparameters"]:
        w.update(per[0])
        return
    for key in per[0]:
        w[key] = torch.stack([p[key] for p in per], dim=1 if key.startswith("energy_") else 0)


def weights(model, sd, spec, heads=(0,)):
    hp = spec["hyperparameters"]
    layers, corr, N = hp["num_interactions"], hp["correlation"], len(spec["species"])
    w = {"embedding_w": sd["node_embedding.linear.weight"]}
    for t in range(layers):
        p, i, pr = f"l{t}_", f"interactions.{t}.", f"products.{t}."
        w[p + "up_w"] = sd[i + "linear_up.weight"]
        if f"{i}alpha" in sd:
            nonlinear_weights(sd, i, p, w)
        else:
            for j, key in enumerate(radial_mlp_keys(sd, i + "conv_tp_weights.")):
                w[f"{p}mlp{j}_w"] = sd[key + ".weight"]
            w[p + "linear_w"] = sd[i + "linear.weight"]
        if f"{i}density_fn.layer0.weight" in sd:
            w[p + "density_w"] = sd[f"{i}density_fn.layer0.weight"]
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
                wt = sd[key]
                if wt.shape[0] == 1 and N > 1:  # an element-agnostic product: the same weights for all
                    wt = wt.expand(N, -1, -1)
                w[f"{p}sc{L}_w{nu}"] = wt
    head_weights(model, sd, spec, heads, w)
    w["avg_num_neighbors"] = torch.tensor([hp["avg_num_neighbors"]], dtype=torch.float64)
    return {k: v.contiguous() for k, v in w.items()}


def nonlinear_weights(sd, i, p, w):
    """A non-linear block's own tensors: its species embeddings, RadialMLPs (torch's Linear and
    LayerNorm layouts), linear_1, linear_res, linear_2 and the density's alpha and beta."""
    for net, name in (("conv_tp_weights", "mlp"), ("density_fn", "density")):
        for j, key in enumerate(radial_mlp_keys(sd, f"{i}{net}.")):
            w[f"{p}{name}{j}_w"], w[f"{p}{name}{j}_b"] = sd[key + ".weight"], sd[key + ".bias"]
            norm = key.rsplit(".", 1)[0] + f".{int(key.rsplit('.', 1)[1]) + 1}"
            if norm + ".weight" in sd and sd[norm + ".weight"].dim() == 1:
                w[f"{p}{name}{j}_ln_w"], w[f"{p}{name}{j}_ln_b"] = sd[norm + ".weight"], sd[norm + ".bias"]
    w[p + "source_w"] = sd[i + "source_embedding.weight"]
    w[p + "target_w"] = sd[i + "target_embedding.weight"]
    w[p + "linear_w"] = sd[i + "linear_1.weight"]
    w[p + "res_w"] = sd[i + "linear_res.weight"]
    w[p + "linear2_w"] = sd[i + "linear_2.weight"]
    w[p + "alpha"], w[p + "beta"] = sd[i + "alpha"], sd[i + "beta"]


def find_trainer(given):
    if given:
        return given
    here = os.path.dirname(os.path.abspath(__file__))
    for candidate in (shutil.which("mlip-trainer"), os.path.join(here, "..", "build", "bin", "mlip-trainer")):
        if candidate and os.path.isfile(candidate):
            return candidate
    raise Refused("mlip-trainer not found: give --mlip-trainer PATH")


def check_structures(species, seed=0):
    """A molecule with one close pair (ZBL's range), a periodic box and a triclinic cell, with up
    to four of the model's elements, atoms on jittered grids (no pair closer than about 1 Å but the
    close one)."""
    import ase.data
    import numpy as np
    from ase import Atoms
    rng = np.random.default_rng(seed)
    pick = [species[k * len(species) // min(4, len(species))] for k in range(min(4, len(species)))]

    def grid(n, spacing):
        g = np.array([[i, j, k] for i in range(n) for j in range(n) for k in range(n)], dtype=float) * spacing
        return g + rng.uniform(-0.25, 0.25, g.shape) * spacing

    symbols = [pick[k % len(pick)] for k in range(8)]
    mol = Atoms(symbols, positions=grid(2, 2.2))
    a, b = (ase.data.atomic_numbers[s] for s in symbols[:2])
    close = 0.6 * (ase.data.covalent_radii[a] + ase.data.covalent_radii[b])
    mol.positions[1] = mol.positions[0] + close * np.array([0.6, 0.8, 0.0])
    box = Atoms([pick[k % len(pick)] for k in range(27)], positions=grid(3, 2.3), cell=np.eye(3) * 6.9, pbc=True)
    tri = Atoms([pick[(k + 1) % len(pick)] for k in range(12)], cell=[[5.0, 0, 0], [1.2, 4.6, 0], [-0.7, 0.9, 4.8]],
                pbc=True)
    tri.set_scaled_positions(grid(3, 1.0 / 3)[rng.choice(27, 12, replace=False)])
    small = Atoms([pick[-1], pick[0]], positions=[[0, 0, 0], [1.1, 0.7, 0.4]], cell=np.eye(3) * 3.1, pbc=True)
    return {"molecule": mol, "periodic": box, "triclinic": tri, "small-cell": small}


def differences(a, b, e0, periodic):
    """Relative differences of two evaluated copies of a structure: the interaction energy (total
    minus the E0s; relative to max(|E|, 1 meV x atoms)), forces and stress (to their largest)."""
    import numpy as np
    out = {}
    ea, eb = a.get_potential_energy() - e0, b.get_potential_energy() - e0
    out["energy"] = abs(ea - eb) / max(abs(ea), 1e-3 * len(a))
    pairs = [("forces", a.get_forces(), b.get_forces())]
    if periodic:
        pairs.append(("stress", a.get_stress(), b.get_stress()))
    for what, x, y in pairs:
        out[what] = float(np.abs(x - y).max() / max(np.abs(x).max(), 1e-6))
    return out


def check(mace_path, mlip_path, ops, spec, weights_dict, head_name, tolerance=None):
    """Both models on check_structures(). float64: mlip against mace-torch, each quantity within
    `tolerance` (relative). float32: both against mace-torch in float64, and mlip's error within 10x
    mace-torch's own float32 error (or 1e-5): float32 rounding, not a different function.
    Returns {quantity: (mlip's worst, its bound, structure)}."""
    from mace.calculators import MACECalculator
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from mlip_ase import MLIPCalculator
    f32 = spec["dtype"] == "float32"
    tol = tolerance or TOLERANCE["float64"]  # (float32: the bound below)
    calc = {"mace": MACECalculator(model_paths=mace_path, device="cpu", default_dtype=spec["dtype"], head=head_name),
            "mlip": MLIPCalculator(mlip_path, ops_library=ops)}
    if f32:
        calc["mace64"] = MACECalculator(model_paths=mace_path, device="cpu", default_dtype="float64", head=head_name)
    shift = weights_dict["energy_shift"]
    if shift.dim() == 2:  # all heads: the column of the head the model's forward() evaluates
        shift = shift[:, spec["hyperparameters"]["heads"].index(head_name)]
    e0 = dict(zip(spec["species"], shift.tolist()))
    worst = {}
    for name, atoms in check_structures(spec["species"]).items():
        copies = {k: atoms.copy() for k in calc}
        for k, c in calc.items():
            copies[k].calc = c
            # evaluated here, under its own default dtype: mace-torch builds some tensors of a
            # multi-head model (the readout's head mask) in torch's default dtype, which the
            # last calculator made set
            torch.set_default_dtype(torch.float32 if k == "mace" and f32 else torch.float64)
            copies[k].get_forces()
            if atoms.pbc.any():
                copies[k].get_stress()
        torch.set_default_dtype(torch.float64)
        args = (sum(e0[s] for s in atoms.get_chemical_symbols()), atoms.pbc.any())
        ours = differences(copies["mace64" if f32 else "mace"], copies["mlip"], *args)
        theirs = differences(copies["mace64"], copies["mace"], *args) if f32 else {}
        for what, rel in ours.items():
            bound = max(10 * theirs[what], 1e-5) if f32 else tol
            if what not in worst or rel / bound > worst[what][0] / worst[what][1]:
                worst[what] = (rel, bound, name)
    return worst


def convert(args):
    model = load(args.model)
    sd = tensors(model)
    check_supported(model, sd)
    head = choose_head(model, args.head)
    spec = hyperparameters(model, sd, args.dtype)
    if args.all_heads:
        spec["hyperparameters"]["heads"] = heads_of(model)
        spec["hyperparameters"]["head"] = heads_of(model)[head]
    w = weights(model, sd, spec, range(len(heads_of(model))) if args.all_heads else (head,))
    spec_path, weights_path = args.output + ".spec.json", args.output + ".weights.pt"
    with open(spec_path, "w") as f:
        json.dump(spec, f, indent=1)
    torch.save(w, weights_path)
    trainer = find_trainer(args.mlip_trainer)
    run = subprocess.run([trainer, "import", spec_path, weights_path, "-o", args.output], capture_output=True, text=True)
    sys.stdout.write(run.stdout)
    if run.returncode != 0:
        raise Refused(f"mlip-trainer import failed: {run.stderr.strip()}")
    return spec, w, heads_of(model)[head]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="mace-torch model (.model, or the *-lammps.pt of create_lammps_model)")
    ap.add_argument("-o", "--output", default="model.pt", help="mlip model file to write")
    ap.add_argument("--head", help="the head of a multi-head model (default: the only one, or 'default')")
    ap.add_argument("--all-heads", action="store_true",
                    help="keep every head of a multi-head model (forward() evaluates --head's; fine-tuning keeps them)")
    ap.add_argument("--dtype", choices=("float32", "float64"), help="the mlip model's dtype (default: the model's)")
    ap.add_argument("--mlip-trainer", help="mlip-trainer executable (default: on PATH or build/bin)")
    ap.add_argument("--ops", help="libmlip_ops.so, for the check (default: build/lib)")
    ap.add_argument("--check", action=argparse.BooleanOptionalAction, default=True,
                    help="compare both models on four structures and fail above the tolerance (default: on)")
    args = ap.parse_args(argv)
    try:
        torch.set_default_dtype(torch.float64)
        try:
            spec, w, head_name = convert(args)
        except (KeyError, AttributeError, IndexError, ValueError, TypeError, RuntimeError) as e:
            raise Refused(f"{args.model}: a layout this importer does not know ({type(e).__name__}: {e})") from e
        hp = spec["hyperparameters"]
        print(f"{args.model} -> {args.output}: mace, {len(spec['species'])} species, r_max {spec['cutoff']} A, "
              f"{hp['num_channels']} channels, max_L {hp['max_L']}, max_ell {hp['max_ell']}, correlation "
              f"{hp['correlation']}, {hp['num_interactions']} interactions, {spec['dtype']}, head {head_name}")
        if args.check:
            ops = args.ops or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build", "lib",
                                           "libmlip_ops.so")
            if not os.path.isfile(ops):
                raise Refused(f"the check needs mlip's operator library: {ops} not found (give --ops, or --no-check)")
            worst = check(args.model, args.output, ops, spec, w, head_name)
            print(f"check against mace-torch{' in float64' if spec['dtype'] == 'float32' else ''} (relative "
                  "difference / bound, structure): " + ", ".join(f"{k} {v:.2g} / {b:.2g} ({n})"
                                                                  for k, (v, b, n) in worst.items()))
            bad = [k for k, (v, b, _) in worst.items() if not v <= b]
            if bad:
                raise CheckFailed(f"{args.output} differs from mace-torch in {', '.join(bad)} beyond the bound: "
                                  "do not use it (and please report the model's shape)")
    except Refused as e:
        print(f"mace_to_mlip: refused: {e}", file=sys.stderr)
        return 1
    except CheckFailed as e:
        print(f"mace_to_mlip: check failed: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
