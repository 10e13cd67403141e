"""Models made by mace-torch, imported by python/mace_to_mlip.py, against mace-torch itself.

Usage: PYTHON mace_import.py MLIP_TRAINER OPS_LIBRARY WORK_DIR [variants|families]

variants: small models (8 channels, 3 elements, float64) of every shape and option the importer
reproduces (max_L 0-2, max_ell 2-4, correlation 1-3, 1-3 interactions, gates, Bessel frequencies,
apply_cutoff, ZBL, Agnesi, Density, residual-first and non-linear (MACE-MH) blocks, edge irreps,
the last readout only, agnostic products, each head of a two-head model, alone and with all heads kept), the create_lammps_model file, the default check (and
that it catches a wrong import, exit 2), and one-line refusals.
families: the public foundation-model families' shapes (docs/models.md) with random weights: 128
channels, 89 elements, float32 where mace-torch's calculator loads them so, each compared to
mace-torch on four structures (molecule with a close pair, periodic box, triclinic cell, small
periodic cell): the interaction energy (total minus the E0s), forces and stress agree to 1e-10
relative in float64; in float32, mlip's difference from mace-torch in float64 is within 10x
mace-torch's own float32 error (mace_to_mlip.check).

mace-torch is the oracle: without it this test fails (scripts/install-deps.sh installs it into the
torch venv).
"""
import contextlib
import io
import json
import os
import sys

os.environ.setdefault("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
try:
    import numpy as np
    import torch
    from e3nn import o3
    from mace import modules
except ImportError as error:
    print(f"FAILED: {error}: mace-torch is this test's oracle (scripts/install-deps.sh installs it into the torch venv)")
    sys.exit(1)
sys.path.insert(0, os.path.join(ROOT, "python"))
import mace_to_mlip  # noqa: E402
from mlip_ase import MLIPCalculator  # noqa: E402

TOLERANCE = 1e-10  # float64; float32: mace_to_mlip.check's bound
RES, PLAIN = "RealAgnosticResidualInteractionBlock", "RealAgnosticInteractionBlock"
DENS, DENS_RES = "RealAgnosticDensityInteractionBlock", "RealAgnosticDensityResidualInteractionBlock"
NONLIN = "RealAgnosticResidualNonLinearInteractionBlock"  # MACE-MH's
MP_ELEMENTS = list(range(1, 84)) + [89, 90, 91, 92, 93, 94]  # the 89 of MPtrj
OFF_ELEMENTS = [1, 6, 7, 8, 9, 15, 16, 17, 35, 53]


def make_model(max_L=1, correlation=3, layers=2, channels=8, elements=(1, 8, 14), dtype="float64", first=PLAIN,
               rest=RES, max_ell=3, r_max=4.5, num_bessel=8, radial_MLP=(16, 16, 16), seed=0, **extra):
    """A ScaleShiftMACE as mace_run_train builds it, with random weights (and random E0s, scale and
    shift); `extra`: other constructor arguments."""
    torch.set_default_dtype(torch.float32 if dtype == "float32" else torch.float64)
    try:
        torch.manual_seed(seed)
        hidden = o3.Irreps((channels * o3.Irreps.spherical_harmonics(max_L)).sort().irreps.simplify())
        heads = extra.get("heads") or ["Default"]
        rng = np.random.default_rng(seed)
        e0 = rng.uniform(-5, -1, (len(heads), len(elements)))
        kw = dict(r_max=r_max, num_bessel=num_bessel, num_polynomial_cutoff=5, max_ell=max_ell,
                  interaction_cls=modules.interaction_classes[rest], interaction_cls_first=modules.interaction_classes[first],
                  num_interactions=layers, num_elements=len(elements), hidden_irreps=hidden, MLP_irreps=o3.Irreps("16x0e"),
                  atomic_energies=e0 if len(heads) > 1 else e0[0], avg_num_neighbors=9.7, atomic_numbers=list(elements),
                  correlation=correlation, gate=torch.nn.functional.silu, radial_MLP=list(radial_MLP),
                  atomic_inter_scale=[1.7, 0.6][:len(heads)] if len(heads) > 1 else 1.7,
                  atomic_inter_shift=[0.1, -0.3][:len(heads)] if len(heads) > 1 else 0.1, use_reduced_cg=False)
        kw.update(extra)
        return modules.ScaleShiftMACE(**kw)
    finally:
        torch.set_default_dtype(torch.float64)


# name: (constructor arguments, what to change after construction)
VARIANTS = {
    "L0-c1-t1": dict(max_L=0, correlation=1, layers=1),
    "L0-c3-t2": dict(max_L=0, correlation=3, layers=2),
    "L1-c2-t3": dict(max_L=1, correlation=2, layers=3),
    "L1-c3-t2": dict(max_L=1, correlation=3, layers=2),
    "L2-c3-t2": dict(max_L=2, correlation=3, layers=2),
    "L2-c2-t1": dict(max_L=2, correlation=2, layers=1),
    "max_ell-2": dict(max_ell=2, max_L=2),
    "max_ell-4": dict(max_ell=4, correlation=2),
    "gate-tanh": dict(gate=torch.tanh),
    "gate-abs": dict(gate=torch.abs),
    "gate-None": dict(gate=None),
    "bessel-trained": dict(),  # frequencies changed below, as training them does
    "no-apply-cutoff": dict(apply_cutoff=False),
    "zbl": dict(pair_repulsion=True),
    "agnesi": dict(distance_transform="Agnesi"),
    "residual-first": dict(first=RES),
    "density": dict(first=DENS, rest=DENS_RES, pair_repulsion=True, distance_transform="Agnesi"),
    "last-readout-only": dict(use_last_readout_only=True),
    "agnostic-product": dict(use_agnostic_product=True),
    "two-heads": dict(heads=["pbe", "Default"]),
    "float32": dict(dtype="float32", first=DENS, rest=DENS_RES, pair_repulsion=True, distance_transform="Agnesi"),
    "edge-irreps": dict(edge_irreps=o3.Irreps("6x0e+6x1o+6x2e")),  # l = 2 beyond the node irreps: zeros
    "nonlinear": dict(first=NONLIN, rest=NONLIN),
    "nonlinear-mh": dict(first=NONLIN, rest=NONLIN, pair_repulsion=True, distance_transform="Agnesi",
                         apply_cutoff=False, use_agnostic_product=True, edge_irreps=o3.Irreps("6x0e+6x1o"),
                         use_edge_irreps_first=True, heads=["omat_pbe", "Default"], layers=3),
    "nonlinear-float32": dict(dtype="float32", first=NONLIN, rest=NONLIN, max_L=2, edge_irreps=o3.Irreps("6x0e+6x1o")),
}


def trained_like(model):
    """What training changes from mace-torch's initial values that the tests must see: the
    non-linear blocks' density factor (beta 0 at first) and their tiny species embeddings."""
    with torch.no_grad():
        for t, block in enumerate(model.interactions):
            if hasattr(block, "beta"):
                block.beta.fill_(0.4 + 0.3 * t)
                block.source_embedding.weight.normal_()
                block.target_embedding.weight.normal_()
    return model

# The public families' shapes (docs/models.md), random weights.
MP = dict(channels=128, elements=MP_ELEMENTS, r_max=6.0, radial_MLP=(64, 64, 64), dtype="float32")
FAMILIES = {
    "MP-0a-medium": dict(MP, first=RES, num_bessel=10),
    "MP-0a-large": dict(MP, first=RES, num_bessel=10, max_L=2),
    "MP-0b-medium": dict(MP, pair_repulsion=True, distance_transform="Agnesi"),
    "MP-0b3-MPA-0-medium": dict(MP, first=DENS, rest=DENS_RES, num_bessel=10, pair_repulsion=True,
                                distance_transform="Agnesi"),
    "OMAT-0-small": dict(MP, first=DENS, rest=DENS_RES, max_L=0, pair_repulsion=True, distance_transform="Agnesi"),
    "OMAT-0-MATPES-medium-float64": dict(MP, first=DENS, rest=DENS_RES, pair_repulsion=True,
                                         distance_transform="Agnesi", dtype="float64"),
    "OFF23-small": dict(channels=96, max_L=0, elements=OFF_ELEMENTS, r_max=5.0, radial_MLP=(64, 64, 64)),
    "OFF23-medium": dict(channels=128, max_L=1, elements=OFF_ELEMENTS, r_max=5.0, radial_MLP=(64, 64, 64)),
    # MACE-MH as mace-torch 0.3.16 builds it: non-linear blocks, edge irreps, two heads
    "MH-two-heads": dict(MP, first=NONLIN, rest=NONLIN, num_bessel=10, pair_repulsion=True,
                         distance_transform="Agnesi", apply_cutoff=False, use_agnostic_product=True,
                         edge_irreps=o3.Irreps("128x0e+128x1o"), use_edge_irreps_first=True,
                         heads=["omat_pbe", "Default"]),
}


def import_model(work, tag, model, extra_args=()):
    src, dst = os.path.join(work, tag + ".model"), os.path.join(work, tag + ".pt")
    torch.save(model, src)
    rc = mace_to_mlip.main([src, "-o", dst, "--mlip-trainer", TRAINER, "--no-check", *extra_args])
    return src, dst, rc


def compare(tag, src, dst, head=None):
    """mace_to_mlip's check with this test's tolerance; False (and the lines why) if above it."""
    with open(dst + ".spec.json") as f:
        spec = json.load(f)
    w = torch.load(dst + ".weights.pt")
    model = torch.load(src, weights_only=False)
    head = head or mace_to_mlip.heads_of(model)[mace_to_mlip.choose_head(model, None)]
    worst = mace_to_mlip.check(src, dst, OPS, spec, w, head, tolerance=TOLERANCE)
    line = ", ".join(f"{k} {v:.1e} / {b:.1e} ({n})" for k, (v, b, n) in worst.items())
    good = all(v <= b for v, b, _ in worst.values())
    print(f"{'ok  ' if good else 'FAIL'} {tag} [{spec['dtype']}, head {head}]: relative difference / bound {line}",
          flush=True)
    return good


def refused(work, model, reason, extra_args=()):
    """The importer refuses `model` in one line containing `reason` (no traceback)."""
    path = os.path.join(work, "refused.model")
    torch.save(model, path)
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        rc = mace_to_mlip.main([path, "-o", os.path.join(work, "refused.pt"), "--mlip-trainer", TRAINER, "--no-check",
                                *extra_args])
    text = err.getvalue().strip()
    if rc != 1 or reason not in text or "\n" in text or "Traceback" in text:
        print(f"FAIL: not refused in one line naming '{reason}': rc {rc}, {text}")
        return False
    print(f"ok   refused: {text}")
    return True


def variants(work):
    ok = True
    for tag, kw in VARIANTS.items():
        model = trained_like(make_model(**kw))
        if tag == "bessel-trained":
            with torch.no_grad():
                model.radial_embedding.bessel_fn.bessel_weights.mul_(torch.linspace(0.9, 1.2, 8))
        src, dst, rc = import_model(work, tag, model)
        if rc != 0:
            print(f"FAIL {tag}: import rc {rc}")
            ok = False
            continue
        ok &= compare(tag, src, dst)
        if tag == "two-heads":  # the other head, asked for by name
            src, dst, rc = import_model(work, tag + "-pbe", model, ["--head", "pbe"])
            ok &= rc == 0 and compare(tag + "-pbe", src, dst, head="pbe")
        if "heads" in kw:  # every head kept: forward() is the chosen head's, each as mace-torch's
            heads = kw["heads"]
            for head in heads:
                name = f"{tag}-all-{head}"
                src, dst, rc = import_model(work, name, model, ["--all-heads", "--head", head])
                ok &= rc == 0 and compare(name, src, dst, head=head)
    ok &= lammps_file(work)
    ok &= lacking_species(work)
    ok &= default_check(work)
    ok &= refusals(work)
    return ok


def lammps_file(work):
    """The TorchScript file of mace-torch's create_lammps_model imports to the same model."""
    from e3nn.util import jit
    from mace.calculators import LAMMPS_MACE
    src = os.path.join(work, "density.model")
    lammps_file, dst = os.path.join(work, "density-lammps.pt"), os.path.join(work, "density-from-lammps.pt")
    jit.compile(LAMMPS_MACE(torch.load(src, weights_only=False))).save(lammps_file)
    if mace_to_mlip.main([lammps_file, "-o", dst, "--mlip-trainer", TRAINER, "--no-check"]) != 0:
        print("FAIL: import of the create_lammps_model file")
        return False
    return compare("from the create_lammps_model file", src, dst)


def lacking_species(work):
    """A structure with a species the model lacks (carbon) is an error that names it."""
    from ase import Atoms
    atoms = Atoms("CH4", positions=[[0, 0, 0], [0.63, 0.63, 0.63], [-0.63, -0.63, 0.63], [-0.63, 0.63, -0.63],
                                    [0.63, -0.63, -0.63]])
    atoms.calc = MLIPCalculator(os.path.join(work, "L1-c3-t2.pt"), ops_library=OPS)
    try:
        atoms.get_potential_energy()
    except Exception as error:  # noqa: BLE001 - any error is right if it names the species
        if "C" in str(error):
            print(f"ok   species the model lacks: {error}")
            return True
    print("FAIL: a structure with carbon evaluated on an H, O, Si model without an error naming C")
    return False


def default_check(work):
    """The check runs by default and passes on a right import; an import made wrong on purpose (the
    model's Bessel frequencies dropped: what the importer once did silently) exits 2."""
    src = os.path.join(work, "bessel-trained.model")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = mace_to_mlip.main([src, "-o", os.path.join(work, "checked.pt"), "--mlip-trainer", TRAINER, "--ops", OPS])
    if rc != 0 or "check against mace-torch" not in out.getvalue():
        print(f"FAIL: the default check on a right import: rc {rc}\n{out.getvalue()}")
        return False
    print("ok   default check: " + out.getvalue().strip().splitlines()[-1])
    out = io.StringIO()
    with contextlib.redirect_stdout(out):  # a float32 model's check (against mace-torch in float64)
        rc = mace_to_mlip.main([os.path.join(work, "float32.model"), "-o", os.path.join(work, "checked32.pt"),
                                "--mlip-trainer", TRAINER, "--ops", OPS])
    if rc != 0 or "in float64" not in out.getvalue():
        print(f"FAIL: the default check of a float32 model: rc {rc}\n{out.getvalue()}")
        return False
    print("ok   default check, float32: " + out.getvalue().strip().splitlines()[-1])
    read_radial = mace_to_mlip.read_radial

    def wrong(model, sd, hp):
        read_radial(model, sd, hp)
        del hp["bessel_weights"]
    mace_to_mlip.read_radial = wrong
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            rc = mace_to_mlip.main([src, "-o", os.path.join(work, "wrong.pt"), "--mlip-trainer", TRAINER, "--ops", OPS])
    finally:
        mace_to_mlip.read_radial = read_radial
    if rc != 2 or "check failed" not in err.getvalue():
        print(f"FAIL: a wrong import passed the check: rc {rc}, {err.getvalue().strip()}")
        return False
    print(f"ok   a wrong import fails the check: {err.getvalue().strip()}")
    return True


def refusals(work):
    ok = True
    model = make_model(heads=["a", "b"])
    ok &= refused(work, model, "choose one with --head")
    ok &= refused(work, model, "is not one of the model's heads", ["--head", "c"])
    ok &= refused(work, make_model(distance_transform="Soft"), "distance transform SoftTransform")
    ok &= refused(work, make_model(rest="RealAgnosticAttResidualInteractionBlock"), "interaction blocks")
    ok &= refused(work, make_model(edge_irreps=o3.Irreps("8x0e+4x1o")), "edge_irreps")
    ok &= refused(work, make_model(radial_type="gaussian"), "radial basis GaussianBasis")
    ok &= refused(work, make_model(correlation=[3, 2]), "correlation differs between layers")
    model = make_model()
    del model.node_embedding
    ok &= refused(work, model, "a layout this importer does not know")
    return ok


def families(work):
    ok = True
    for tag, kw in FAMILIES.items():
        # a multi-head family with every head kept (forward(): the default head's, compared)
        src, dst, rc = import_model(work, tag, trained_like(make_model(**kw)), ["--all-heads"] if "heads" in kw else [])
        if rc != 0:
            print(f"FAIL {tag}: import rc {rc}")
            ok = False
            continue
        ok &= compare(tag, src, dst)
        for path in (src, dst, dst + ".weights.pt"):
            os.remove(path)  # hundreds of MB at 89 elements
    return ok


def main():
    global TRAINER, OPS
    TRAINER, OPS, work = sys.argv[1:4]
    which = sys.argv[4] if len(sys.argv) > 4 else "variants"
    os.makedirs(work, exist_ok=True)
    torch.set_default_dtype(torch.float64)
    ok = variants(work) if which == "variants" else families(work)
    print("ok" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
