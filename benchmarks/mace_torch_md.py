"""mace-torch's cost per MD step on one structure, for benchmarks/bench_mace.sh.

    python mace_torch_md.py MODEL XYZ THREADS DEVICE DTYPE ROUTE CALLS

ROUTE:
  ase    its ASE calculator (MACECalculator), one get_forces() per step, each on new positions:
         the neighbour list (matscipy, on the CPU), the graph built and copied to DEVICE, the
         model with forces and stress (the calculator computes stress for MACE models), per call
  graph  the model alone on a graph built once (the calculator's own batch), forces only: the
         least any route of mace-torch's can do per step (no neighbour list, no stress)
CALLS calls are timed after one that is not (the first compiles and allocates); on a GPU each call
ends with torch.cuda.synchronize(). Prints "us_per_atom peak_allocated_mib" (PyTorch's peak allocated
memory on the GPU over the timed calls, "-" on the CPU; bench_mace.sh reports the GPU's memory in
use instead, as for mlip). An out-of-memory error prints "oom -".
"""
import sys
import time

import torch
from ase.io import read
from mace.calculators import MACECalculator


def main():
    model, xyz, threads, device, dtype, route, calls = sys.argv[1:8]
    torch.set_num_threads(int(threads))
    atoms = read(xyz)
    calc = MACECalculator(model_paths=model, device=device, default_dtype=dtype)
    gpu = device.startswith("cuda")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    if route == "ase":
        atoms.calc = calc

        def step():
            atoms.positions[0, 0] += 1e-4  # new positions: the calculator computes anew
            atoms.get_forces()
    elif route == "graph":
        batch = calc._atoms_to_batch(atoms).to_dict()  # mace-torch 0.3.16's own batch of atoms
        net = calc.models[0]

        def step():
            net(dict(batch), compute_force=True, compute_stress=False, training=False)["forces"].sum().item()
    else:
        raise SystemExit(f"mace_torch_md.py: ROUTE is ase or graph, not {route}")
    try:
        step()
        sync()
        if gpu:
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        for _ in range(int(calls)):
            step()
        sync()
        seconds = time.perf_counter() - start
    except (torch.OutOfMemoryError, RuntimeError) as error:   # CUDA's and cuBLAS's out-of-memory errors too
        if isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error) or "ALLOC_FAILED" in str(error):
            print("oom -")
            return
        raise
    peak = f"{torch.cuda.max_memory_allocated() / 2**20:.0f}" if gpu else "-"
    print(f"{seconds / int(calls) / len(atoms) * 1e6:.4g} {peak}")


if __name__ == "__main__":
    main()
