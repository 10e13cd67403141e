"""Figures of docs/pair_style.md: halo against ghost exchange (and the cost model on those
medians), PaiNN's cost against se_e2_a, and PaiNN against se_e2_a for the same training time.
docs/models.md quotes some of them too."""
import tables
from figures import figure, g, percent, ratio

EXCHANGE = "bench_exchange/2026-11-26-c83daf5-1536"
MP_COST = "bench_mp_cost/2026-11-26-c3435ab"
MP_ACCURACY = "mp_accuracy/2026-11-26-bd69a71"


def times(a, b):
    """a / b with two decimals, as the tables print their ratios"""
    return f"{a / b:.2f}x"


def mib(x):
    return f"{x:.0f} MiB"


# --- halo against exchange, 1536 water atoms ---

def exchange_med(run, field, path, layers, ranks=1):
    return run.med("exchange", field, path=path, atoms=1536, layers=layers, ranks=ranks)


def memory_span(run, path):
    """the median peak MiB per rank on 1 rank at the smallest and the largest L of the run"""
    layers = sorted({int(r["layers"]) for r in run.rows("exchange")})
    lo, hi = (exchange_med(run, "peak_rss_mib", path, L) for L in (layers[0], layers[-1]))
    return f"{lo:.0f} to {hi:.0f} MiB"


@figure("exchange-memory-span", EXCHANGE)
def _(run):
    """the exchange's peak memory per rank, 1 rank, from the smallest L to the largest"""
    return memory_span(run, "exchange")


@figure("halo-memory-span", EXCHANGE)
def _(run):
    return memory_span(run, "halo")


@figure("halo-exchange-l3-2ranks", EXCHANGE)
def _(run):
    """halo over exchange, L = 3, 1536 atoms, 2 ranks (medians)"""
    return ratio(exchange_med(run, "us_per_atom_step", "halo", 3, 2),
                 exchange_med(run, "us_per_atom_step", "exchange", 3, 2))


# --- the cost model on the run's medians (the table 'bench_exchange cost') ---

def weak_scaling(run):
    """{(ranks, path): row} of the cost model's weak-scaling table, numbers without separators"""
    lines = tables.exchange_cost(run.path).split("Weak scaling")[1].split("\n\n")[1].splitlines()
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = {}
    for line in lines[2:]:
        r = dict(zip(head, (c.strip().replace(",", "") for c in line.strip("|").split("|"))))
        rows[(int(r["ranks"]), r["path"])] = r
    return rows


@figure("cost-model-efficiency", EXCHANGE)
def _(run):
    """the lowest weak-scaling efficiency of either path, to 10,000 ranks"""
    return min((r["efficiency"] for r in weak_scaling(run).values()), key=lambda e: float(e.rstrip("%")))


@figure("cost-model-bytes", EXCHANGE)
def _(run):
    """exchange over halo, bytes sent per rank per step, at 10,000 ranks"""
    rows = weak_scaling(run)
    return ratio(float(rows[(10000, "exchange")]["MB/rank/step"]), float(rows[(10000, "halo")]["MB/rank/step"]))


@figure("cost-model-compute", EXCHANGE)
def _(run):
    """halo over exchange, compute per step, at 10,000 ranks"""
    rows = weak_scaling(run)
    return ratio(float(rows[(10000, "halo")]["compute ms"]), float(rows[(10000, "exchange")]["compute ms"]))


# --- PaiNN F=32 L=3 (default chunk) against se_e2_a, 10368 atoms, 2 ranks ---

PAINN3 = "PaiNN F=32 L=3, chunk default"


def cost(run, model, dtype, field="us_per_atom_step"):
    return run.med("cost", field, atoms=10368, ranks=2, dtype=dtype, model=model)


for _dtype in ("f64", "f32"):
    figure(f"painn3-cost-{_dtype}", MP_COST)(
        lambda run, d=_dtype: times(cost(run, PAINN3, d), cost(run, "se_e2_a", d)))
    figure(f"painn3-memory-{_dtype}", MP_COST)(lambda run, d=_dtype: mib(cost(run, PAINN3, d, "peak_rss_mib")))
    figure(f"se-memory-{_dtype}", MP_COST)(lambda run, d=_dtype: mib(cost(run, "se_e2_a", d, "peak_rss_mib")))


# --- PaiNN against se_e2_a, the same training time (mp_accuracy.sh) ---

SE = "se_e2_a (the demo's: embedding 16-32-64, fitting 120x3)"
PAINN = "PaiNN, 32 features, 3 layers, 8 radial functions"


def acc(run, model, field):
    return run.med("rows", field, model=model)


@figure("mp-accuracy-se-steps", MP_ACCURACY)
def _(run):
    return g(acc(run, SE, "steps"), 6)


@figure("mp-accuracy-painn-steps", MP_ACCURACY)
def _(run):
    return g(acc(run, PAINN, "steps"), 6)


@figure("mp-accuracy-fewer-steps", MP_ACCURACY)
def _(run):
    return f"{acc(run, SE, 'steps') / acc(run, PAINN, 'steps'):.1f}x"


@figure("mp-accuracy-energy-lower", MP_ACCURACY)
def _(run):
    """how much lower PaiNN's test energy RMSE is than se_e2_a's (medians)"""
    return percent(acc(run, PAINN, "test_e_mev_atom"), acc(run, SE, "test_e_mev_atom"))


@figure("mp-accuracy-force-lower", MP_ACCURACY)
def _(run):
    return percent(acc(run, PAINN, "test_f_mev_a"), acc(run, SE, "test_f_mev_a"))


@figure("mp-accuracy-md-cost", MP_ACCURACY)
def _(run):
    """PaiNN's MD cost over se_e2_a's, 1536 atoms on 1 rank"""
    return times(acc(run, PAINN, "md_us_per_atom_step"), acc(run, SE, "md_us_per_atom_step"))


# --- with MACE, before and after the energy shift's re-fit at each validation (f8f3925) ---

MP_BEFORE_REFIT = "mp_accuracy/2026-12-03-61692ff"
MP_REFIT = "mp_accuracy/2026-12-03-f8f3925"
MACE = "MACE, 32 channels, max_L 1, correlation 3, 2 interactions"


def energies(run):
    """the three models' median test energy RMSE, meV/atom"""
    return ", ".join(g(acc(run, m, "test_e_mev_atom"), 3) for m in (SE, PAINN, MACE)) + " meV/atom"


@figure("mp-refit-test-e", MP_REFIT)
def _(run):
    return energies(run)


@figure("mp-before-refit-test-e", MP_BEFORE_REFIT)
def _(run):
    return energies(run)


@figure("mp-refit-test-f", MP_REFIT)
def _(run):
    return ", ".join(g(acc(run, m, "test_f_mev_a"), 3) for m in (SE, PAINN, MACE)) + " meV/Å"


@figure("mp-refit-mace-steps", MP_REFIT)
def _(run):
    """MACE's steps in the time against PaiNN's"""
    return f"{acc(run, MACE, 'steps') / acc(run, PAINN, 'steps'):.2f}x"


@figure("mp-refit-mace-md-cost", MP_REFIT)
def _(run):
    return times(acc(run, MACE, "md_us_per_atom_step"), acc(run, PAINN, "md_us_per_atom_step"))
