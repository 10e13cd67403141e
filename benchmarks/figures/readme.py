"""Figures of README.md (the streaming ones come from data_sets.py)."""
from figures import figure, ratio
from figures.gpu import median_us

DEEPMD = "bench_deepmd/2026-11-26-8648c6a"


def md(run, model):
    """us/atom-step at 10368 water atoms on 1 rank, the median of the run's repeats"""
    return run.med("md", "us_per_atom_step", model=model, atoms=10368, ranks=1)


@figure("readme-compressed-speedup", DEEPMD)
def _(run):
    return ratio(md(run, "mlip se_e2_a f64"), md(run, "mlip se_e2_a f64 compressed"), 2)


@figure("readme-deepmd-compressed-ratio", DEEPMD)
def _(run):
    return ratio(md(run, "DeePMD-kit TF f64 compressed"), md(run, "mlip se_e2_a f64 compressed"), 2)


@figure("readme-demo-after-setup", "demo/2026-12-01-921a4fb")
def _(run):
    phases = {r["phase"]: float(r["seconds"]) for r in run.rows("phases")}
    return f"{(phases['total'] - phases['setup']) / 60:.1f} min"


@figure("readme-setup-fresh", "demo/2026-11-27-42b84d7")
def _(run):
    return f"{sum(float(r['seconds']) for r in run.rows('setup')) / 60:.1f} min"


@figure("readme-gpu-compressed-100k", "gpu-check/2026-12-04-33c9eba")
def _(run):
    f64, f32 = (median_us(run, f"mlip se_e2_a {p} compressed on cuda, device graph", 98304) for p in ("f64", "f32"))
    return f"{f64:.3g} us/atom-step (float64), {f32:.3g} (float32)"
