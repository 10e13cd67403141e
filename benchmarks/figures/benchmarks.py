"""Figures of docs/benchmarks.md (its first part: up to "Data sets larger than memory")."""
from figures import figure, g, ratio

DEEPMD = "bench_deepmd/2026-11-26-8648c6a"


def deepmd_md(run, model, atoms, ranks):
    return run.med("md", "us_per_atom_step", model=model, atoms=atoms, ranks=ranks)


@figure("deepmd-compressed-f64-vs-deepmd", DEEPMD)
def _(run):
    """DeePMD-kit's compressed model over mlip's, 10368 atoms, 2 ranks, float64"""
    return ratio(deepmd_md(run, "DeePMD-kit TF f64 compressed", 10368, 2),
                 deepmd_md(run, "mlip se_e2_a f64 compressed", 10368, 2), 2)
