"""ASE calculator for mlip model files.

The model file is evaluated exactly as `pair_style mlip` evaluates it (docs/model-format.md):
the frozen TorchScript `forward(species, edge_index, edge_vectors, n_centers)` returns per-atom
energies, and forces and the virial come from autograd with respect to the edge vectors
r_ij = x_j - x_i (+ cell shift). Periodic images of an atom are the same node of the graph, so
message-passing models need no ghost atoms here.
"""
import json
import os

import numpy as np
import torch
from ase.calculators.calculator import Calculator, all_changes
from ase.neighborlist import primitive_neighbor_list

METADATA_FILE = "mlip/metadata.json"
_loaded_libraries = set()


def _release(version):
    """'2.11.0+cu130' -> '2.11.0': the part of a torch version that its C++ ABI follows."""
    return version.split("+")[0].strip()


def check_torch_version(path):
    """Raises RuntimeError, naming both versions, if libmlip_ops.so at `path` was built against
    another LibTorch than this Python's torch (its C++ ABI differs from release to release)."""
    stamp = os.path.splitext(path)[0] + ".torch-version"
    if not os.path.isfile(stamp):
        return
    with open(stamp) as f:
        built = f.read().strip()
    if built and _release(built) != _release(torch.__version__):
        raise RuntimeError(
            f"{path} was built against LibTorch {built}, but this Python has torch {torch.__version__}: "
            f"install torch=={_release(built)} (pip install torch=={_release(built)}) or rebuild mlip against "
            f"this torch (MLIP_TORCH_VERSION={_release(torch.__version__)} for scripts/install-deps.sh and "
            f"scripts/build.sh, with a build directory of its own: MLIP_BUILD_DIR)")


def load_ops_library(path):
    """Registers mlip's LibTorch operators (torch.ops.mlip) from libmlip_ops.so, once."""
    path = os.path.abspath(path)
    if path in _loaded_libraries:
        return
    if not os.path.isfile(path):
        raise FileNotFoundError(f"mlip operators library {path} does not exist "
                                "(it is <build>/lib/libmlip_ops.so after scripts/setup.sh)")
    check_torch_version(path)
    try:
        torch.ops.load_library(path)
    except OSError as error:
        raise RuntimeError(f"{path} does not load into torch {torch.__version__}: {error}") from error
    _loaded_libraries.add(path)


def load_model(path, ops_library=None, device="cpu"):
    """Loads a model file; returns (TorchScript module, metadata dict)."""
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: no such model file")
    ops_library = ops_library or os.environ.get("MLIP_OPS_LIBRARY")
    if ops_library:
        load_ops_library(ops_library)
    extra = {METADATA_FILE: ""}
    try:
        model = torch.jit.load(path, map_location=device, _extra_files=extra)
    except RuntimeError as error:
        if "mlip::" in str(error) and not ops_library:
            raise RuntimeError(
                f"{path}: the model calls mlip's operators (torch.ops.mlip); pass "
                "ops_library='<build>/lib/libmlip_ops.so' or set MLIP_OPS_LIBRARY") from error
        raise
    if not extra[METADATA_FILE]:
        raise ValueError(f"{path}: not an mlip model file (it has no {METADATA_FILE})")
    metadata = json.loads(extra[METADATA_FILE])
    units = metadata.get("units", {})
    if units.get("energy", "eV") != "eV" or units.get("length", "angstrom") != "angstrom":
        raise ValueError(f"{path}: units {units} are not eV and angstrom, which ASE uses")
    model.eval()
    return model, metadata


class MLIPCalculator(Calculator):
    """Energy, forces, stress and per-atom energies from an mlip `model.pt`.

    model:       path of the model file (mlip-trainer export, compress or train's output).
    ops_library: path of libmlip_ops.so (se_e2_a models call its operators); default
                 $MLIP_OPS_LIBRARY.
    device:      "cpu" or "cuda" (a CUDA build of torch).
    """

    implemented_properties = ["energy", "free_energy", "energies", "forces", "stress"]

    def __init__(self, model, ops_library=None, device="cpu", **kwargs):
        super().__init__(**kwargs)
        self.model_path = model
        self.device = torch.device(device)
        self.model, self.metadata = load_model(model, ops_library, self.device)
        self.species = list(self.metadata["species"])
        self.cutoff = float(self.metadata["cutoff"])
        self.dtype = torch.float32 if self.metadata.get("dtype") == "float32" else torch.float64

    def species_indices(self, atoms):
        index = {symbol: k for k, symbol in enumerate(self.species)}
        missing = sorted(set(atoms.get_chemical_symbols()) - set(index))
        if missing:
            raise ValueError(f"{self.model_path}: the model has no species {', '.join(missing)} "
                             f"(it has {', '.join(self.species)})")
        return np.array([index[s] for s in atoms.get_chemical_symbols()], dtype=np.int64)

    def graph(self, atoms):
        """Edges within the cutoff: (edge_index (2, E), edge_vectors (E, 3)) in float64."""
        positions = atoms.get_positions()
        cell = np.asarray(atoms.get_cell())
        i, j, shifts = primitive_neighbor_list("ijS", atoms.get_pbc(), cell, positions,
                                               self.cutoff, self_interaction=False)
        vectors = positions[j] - positions[i] + shifts @ cell
        return np.stack([i, j]).astype(np.int64), vectors

    def calculate(self, atoms=None, properties=("energy",), system_changes=all_changes):
        super().calculate(atoms, properties, system_changes)
        atoms = self.atoms
        n = len(atoms)
        species = torch.from_numpy(self.species_indices(atoms)).to(self.device)
        edge_index, vectors = self.graph(atoms)
        index = torch.from_numpy(edge_index).to(self.device)
        r = torch.from_numpy(vectors).to(self.device, self.dtype).requires_grad_(True)
        energies = self.model(species, index, r, n)
        energy = energies.sum()
        (grad,) = torch.autograd.grad(energy, r) if r.numel() else (torch.zeros_like(r),)
        grad = grad.detach().to(torch.float64).cpu().numpy()

        # F_i = -dE/dx_i with r_ij = x_j - x_i: each edge adds g to its centre, -g to its neighbour.
        forces = np.zeros((n, 3))
        np.add.at(forces, edge_index[0], grad)
        np.subtract.at(forces, edge_index[1], grad)
        self.results["energies"] = energies.detach().to(torch.float64).cpu().numpy()
        self.results["energy"] = float(self.results["energies"].sum())
        self.results["free_energy"] = self.results["energy"]
        self.results["forces"] = forces
        if atoms.cell.rank == 3 and all(atoms.get_pbc()):
            # dE/d(strain) = sum_edges r (x) dE/dr = -virial; ASE's stress is that over the volume.
            dedstrain = vectors.T @ grad
            stress = 0.5 * (dedstrain + dedstrain.T) / atoms.get_volume()
            self.results["stress"] = stress.flat[[0, 4, 8, 5, 2, 1]]
