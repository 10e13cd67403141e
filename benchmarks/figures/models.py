"""Figures of docs/models.md: MACE against mace-torch (bench_mace), what each model costs in MD
(bench_pair), the compressed model's NVE speed-up (nve_drift).
It also quotes figures of docs/pair_style.md (benchmarks/figures/pair_style.py)."""
from figures import figure, g, ratio

# the bench_pair run behind docs/benchmarks.md's pair tables; dirty until its clean rerun replaces it
BENCH_PAIR = "bench_pair/2026-11-27-4c6c2fa"
MACE = "bench_mace/2026-11-28-3ffffb6"       # train.tsv: both sides at equal cores
MACE_MD = "bench_mace/2026-11-28-4797624"    # md.tsv: both sides at equal cores
MACE_THREADS = "bench_mace/2026-11-28-0be4767"  # md.tsv, 10368 atoms: mlip's threads (chunks side by side)
MACE_MEMORY = "bench_mace/2026-11-26-e8cdcfa"  # memory.tsv (the 128-channel model)
NVE = "nve_drift/2026-11-26-91197ec"


def times(a, b):
    """a / b with one decimal"""
    return f"{a / b:.1f}x"


def span(values, fmt="{:.0f}", unit=""):
    """'lo-hi' of values (one value where both print the same)"""
    lo, hi = (fmt.format(v) for v in (min(values), max(values)))
    return (lo if lo == hi else f"{lo}-{hi}") + unit


@figure("models-nve-compressed-speedup", NVE)
def _(run):
    """uncompressed over compressed us/atom-step in the 10 ps NVE run"""
    return times(run.med("rows", "us_per_atom_step", model="uncompressed"),
                 run.med("rows", "us_per_atom_step", model="compressed"))


# --- MD cost per model (bench_pair: 1152 and 10368 water atoms, float64 unless said) ---

SE, SE_C, SE32_C, PAINN = ("mlip se_e2_a f64", "mlip se_e2_a f64 compressed", "mlip se_e2_a f32 compressed",
                           "mlip painn f64")


def pair(run, potential, atoms, ranks):
    return run.med("md", "us_per_atom_step", potential=potential, atoms=atoms, ranks=ranks)


def sizes(run, potential, ranks):
    """the atom counts the run has for potential on that many ranks"""
    return sorted({r["atoms"] for r in run.rows("md", potential=potential, ranks=ranks)}, key=int)


def pair_span(run, potential, ranks):
    return span([pair(run, potential, n, ranks) for n in sizes(run, potential, ranks)])


def ratio_span(run, num, den, ranks_list):
    """num over den at each size both ran and each rank count of ranks_list"""
    return span([pair(run, num, n, k) / pair(run, den, n, k) for k in ranks_list
                 for n in sorted(set(sizes(run, num, k)) & set(sizes(run, den, k)))], "{:.1f}", "x")


@figure("models-se-1rank", BENCH_PAIR)
def _(run):
    return pair_span(run, SE, 1)


@figure("models-se-2ranks", BENCH_PAIR)
def _(run):
    return pair_span(run, SE, 2)


@figure("models-compressed-1rank", BENCH_PAIR)
def _(run):
    return pair_span(run, SE_C, 1)


@figure("models-compressed-speedup", BENCH_PAIR)
def _(run):
    """uncompressed over compressed, float64, 1 rank, each size"""
    return ratio_span(run, SE, SE_C, (1,))


@figure("models-compressed-f32-1rank", BENCH_PAIR)
def _(run):
    return pair_span(run, SE32_C, 1)


@figure("models-compressed-f32-further", BENCH_PAIR)
def _(run):
    """compressed float64 over compressed float32, 1 and 2 ranks, where both ran"""
    return ratio_span(run, SE_C, SE32_C, (1, 2))


@figure("models-painn-1rank", BENCH_PAIR)
def _(run):
    return pair_span(run, PAINN, 1)


@figure("models-painn-2ranks", BENCH_PAIR)
def _(run):
    return pair_span(run, PAINN, 2)


@figure("models-painn-vs-se", BENCH_PAIR)
def _(run):
    """PaiNN (64 features, 2 layers) over se_e2_a, each size and rank count"""
    return ratio_span(run, PAINN, SE, (1, 2))


@figure("models-painn-10368-1rank", BENCH_PAIR)
def _(run):
    return f"{pair(run, PAINN, 10368, 1):.0f}"


# --- MACE against mace-torch, the same model (bench_mace) ---

def mace_md(run, code, atoms, ranks, threads, field="us_per_atom_step"):
    return run.med("md", field, code=code, atoms=atoms, ranks=ranks, threads=threads)


for _atoms in (1152, 3456):
    # equal cores: mlip on `cores` ranks of 1 thread, and on 1 rank of `cores` threads, against
    # mace-torch on 1 process of `cores` threads
    for _cores in (1, 2):
        figure(f"models-mace-md-{_atoms}-{_cores}", MACE_MD)(
            lambda run, n=_atoms, c=_cores: times(mace_md(run, "mace-torch", n, 1, c), mace_md(run, "mlip", n, c, 1)))
    figure(f"models-mace-md-{_atoms}-threads", MACE_MD)(
        lambda run, n=_atoms: times(mace_md(run, "mace-torch", n, 1, 2), mace_md(run, "mlip", n, 1, 2)))


@figure("models-mace-memory-ratio-3456", MACE_MD)
def _(run):
    return ratio(mace_md(run, "mace-torch", 3456, 1, 1, "peak_rss_mib"), mace_md(run, "mlip", 3456, 1, 1, "peak_rss_mib"), 2)


@figure("models-mace-mlip-memory-3456", MACE_MD)
def _(run):
    return f"{mace_md(run, 'mlip', 3456, 1, 1, 'peak_rss_mib'):.0f} MiB"


@figure("models-mace-torch-memory-3456", MACE_MD)
def _(run):
    return f"{mace_md(run, 'mace-torch', 3456, 1, 1, 'peak_rss_mib') / 1024:.1f} GiB"


@figure("models-mace-us-10368-1rank", MACE_THREADS)
def _(run):
    return f"{mace_md(run, 'mlip', 10368, 1, 1):.0f}"


@figure("models-mace-threads-10368", MACE_THREADS)
def _(run):
    """2 threads in one rank against 1 (the operators and LibTorch's own on LibTorch's threads)"""
    return times(mace_md(run, "mlip", 10368, 1, 1), mace_md(run, "mlip", 10368, 1, 2))


for _ranks in (1, 2):
    figure(f"models-mace-big-memory-{_ranks}", MACE_MEMORY)(
        lambda run, k=_ranks: f"{run.med('memory', 'peak_rss_mib', atoms=10368, ranks=k):.0f} MiB")


def train(run, code, ranks, threads):
    return run.med("train", "frames_per_s", code=code, ranks=ranks, threads=threads)


# training at equal cores: name -> (mlip's ranks, its threads, mace-torch's threads)
for _name, (_ranks, _threads, _torch) in {"1": (1, 1, 1), "2": (2, 1, 2), "2-threads": (1, 2, 2)}.items():
    figure(f"models-mace-train-{_name}", MACE)(
        lambda run, k=_ranks, t=_threads, m=_torch: times(train(run, "mlip", k, t), train(run, "mace-torch", 1, m)))

for _code, _name in (("mlip", "mlip"), ("mace-torch", "torch")):
    figure(f"models-mace-train-{_name}-rate", MACE)(lambda run, c=_code: f"{g(train(run, c, 1, 1))} frames/s")


MACE_ACCURACY = "bench_mace/2026-12-03-b03b3d4"


@figure("models-mace-acc-force", MACE_ACCURACY)
def _(run):
    f = lambda code: run.med("accuracy", "force_rmse_mev_per_a", code=code)
    return f"{g(f('mlip'))} against {g(f('mace-torch'))} meV/Å"


@figure("models-mace-acc-energy", MACE_ACCURACY)
def _(run):
    e = lambda code: run.med("accuracy", "energy_rmse_mev_per_atom", code=code)
    return f"{g(e('mlip'))} against {g(e('mace-torch'))} meV/atom (the E0-only baseline: {g(e('E0-baseline'))})"
