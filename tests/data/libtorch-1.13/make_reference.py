"""Reference energies and forces of the model files in this folder, from the stack that wrote them.

Run with Debian 12's python3-torch (LibTorch 1.13.1, the library mlip's C++ used before PyPI's
LibTorch 2.x) and python3-ase:

    /usr/bin/python3 make_reference.py water.xyz se_e2_a.pt painn.pt > reference.json

The graph comes from ASE's neighbour list, r_ij = x_j - x_i + S.cell; forces are the negative
gradient of the total energy by autograd through the edge vectors, as mlip's model contract
defines them. tests/test_model.cpp checks that today's build gives the same numbers.
"""
import json
import sys

import ase.io
import numpy as np
import torch
from ase.neighborlist import neighbor_list


def evaluate(path, atoms):
    extra = {"mlip/metadata.json": ""}
    model = torch.jit.load(path, _extra_files=extra)
    meta = json.loads(extra["mlip/metadata.json"])
    dtype = torch.float32 if meta["dtype"] == "float32" else torch.float64
    i, j, d = neighbor_list("ijD", atoms, meta["cutoff"])
    species = torch.tensor([meta["species"].index(s) for s in atoms.get_chemical_symbols()])
    edge_index = torch.from_numpy(np.stack([i, j]).astype(np.int64))
    vectors = torch.tensor(d, dtype=dtype).requires_grad_(True)
    energies = model(species, edge_index, vectors, len(atoms))
    (grad,) = torch.autograd.grad(energies.sum(), [vectors])
    forces = torch.zeros((len(atoms), 3), dtype=torch.float64)
    forces.index_add_(0, edge_index[0], grad.double())
    forces.index_add_(0, edge_index[1], -grad.double())
    return {"libtorch": torch.__version__, "atom_energy": energies.double().tolist(), "forces": forces.tolist()}


def main():
    atoms = ase.io.read(sys.argv[1])
    out = {path.rsplit("/", 1)[-1]: evaluate(path, atoms) for path in sys.argv[2:]}
    json.dump(out, sys.stdout, indent=1)


if __name__ == "__main__":
    main()
