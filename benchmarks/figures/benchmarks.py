"""Figures of docs/benchmarks.md (its first part: up to "Data sets larger than memory")."""
import re
import statistics

import tables

from figures import figure, g, percent, ratio

FINE_TUNING = "fine_tuning/2026-11-26-f78c933"
BASE = "base model (5 min on data_0 + data_1), not trained on the new frames"
SCRATCH = "from scratch on the 16 new frames, 3 min"
TUNED = "fine-tuned from the base on the 16 new frames, 3 min"


@figure("ft-base-test-force", FINE_TUNING)
def _(run):
    return f"{g(run.med('rows', 'test_f_mev_a', run=BASE))} meV/Å"


@figure("ft-scratch-test-force", FINE_TUNING)
def _(run):
    return g(run.med("rows", "test_f_mev_a", run=SCRATCH))


@figure("ft-gain-energy", FINE_TUNING)
def _(run):
    return percent(run.med("rows", "test_e_mev_atom", run=TUNED), run.med("rows", "test_e_mev_atom", run=BASE))


@figure("ft-gain-force", FINE_TUNING)
def _(run):
    return percent(run.med("rows", "test_f_mev_a", run=TUNED), run.med("rows", "test_f_mev_a", run=BASE), 1)


MACE_BEFORE = "bench_mace/2026-11-26-949f3ca"


@figure("mace-memory-before-1rank", MACE_BEFORE)
def _(run):
    values = run.values("memory", "peak_rss_mib", ranks=1)
    return f"{g(statistics.median(values) / 1024)} GiB ({g(min(values) / 1024)}-{g(max(values) / 1024)})"


@figure("mace-memory-before-2ranks", MACE_BEFORE)
def _(run):
    return f"{g(run.med('memory', 'peak_rss_mib', ranks=2))} MiB"


DEMO = "demo/2026-12-01-921a4fb"
DEMO_FRESH = "demo/2026-11-27-42b84d7"   # the set-up on a fresh machine (setup.tsv, NOTE.md)


def demo_value(run, key):
    return float(run.rows("summary", key=key)[0]["value"])


def demo_minutes(run, *phases):
    """the minutes of the demo's phases together (a phase the run did not record counts 0)"""
    seconds = {r["phase"]: float(r["seconds"]) for r in run.rows("phases")}
    return f"{sum(seconds.get(p, 0) for p in phases) / 60:.1f} min"


@figure("demo-total", DEMO)
def _(run):
    return demo_minutes(run, "total")


@figure("demo-training", DEMO)
def _(run):
    return demo_minutes(run, "training")


@figure("demo-md", DEMO)
def _(run):
    """validation and MD (runs before demo.sh's own validation phase counted it in md)"""
    return demo_minutes(run, "validation", "md")


@figure("demo-val-energy", DEMO)
def _(run):
    return f"{demo_value(run, 'val_energy_rmse_mev_atom'):.2f} meV/atom"




@figure("demo-md-speed", DEMO)
def _(run):
    return (f"{demo_value(run, 'md_ns_day'):.2f} ns/day ({g(demo_value(run, 'md_us_per_atom_step'))} us/atom-step "
            f"on {demo_value(run, 'md_ranks'):.0f} ranks)")


@figure("demo-mean-t", DEMO)
def _(run):
    return f"{demo_value(run, 'md_mean_t_k'):.0f} K"


@figure("demo-oo-peak", DEMO)
def _(run):
    return f"{demo_value(run, 'oo_peak_a'):.2f} Å"


@figure("demo-checks", DEMO)
def _(run):
    return f"{demo_value(run, 'checks_passed'):.0f} of {demo_value(run, 'checks'):.0f}"


@figure("demo-disk", DEMO)
def _(run):
    return f"{float(run.rows('disk', path='total')[0]['bytes']) / 1e9:.1f} GB"


@figure("demo-setup-fresh", DEMO_FRESH)
def _(run):
    parts = [(r["step"].split("/")[-1], float(r["seconds"]) / 60) for r in run.rows("setup")]
    each = ", ".join(f"{step} {minutes:.1f}" for step, minutes in parts)
    return f"{sum(m for _, m in parts):.1f} min ({each})"


# --- MACE against mace-torch: test errors after the same wall time, each side's recipe ---
MACE_ACCURACY = "bench_mace/2026-12-03-b03b3d4"


def accuracy(run, code, field):
    return run.med("accuracy", field, code=code)


@figure("mace-acc-force", MACE_ACCURACY)
def _(run):
    f = lambda code: accuracy(run, code, "force_rmse_mev_per_a")
    return f"{g(f('mlip'))} against {g(f('mace-torch'))} meV/Å (zero forces: {g(f('E0-baseline'))})"


@figure("mace-acc-energy", MACE_ACCURACY)
def _(run):
    e = lambda code: accuracy(run, code, "energy_rmse_mev_per_atom")
    return f"{g(e('mlip'))} against {g(e('mace-torch'))} meV/atom"


@figure("mace-acc-e0", MACE_ACCURACY)
def _(run):
    return f"{g(accuracy(run, 'E0-baseline', 'energy_rmse_mev_per_atom'))} meV/atom"


BATCH_LR = "batch_lr/2026-11-29-05eb819"


def batch_forces(run, batch):
    values = run.values("rows", "force_rmse_mev_a", batch=batch)
    return g(min(values)) if len(values) == 1 else f"{g(min(values))}-{g(max(values))}"


@figure("batch-lr-b2-forces", BATCH_LR)
def _(run):
    return batch_forces(run, 2)


@figure("batch-lr-b16-forces", BATCH_LR)
def _(run):
    return f"{batch_forces(run, 16)} meV/Å"


@figure("batch-lr-b64-forces", BATCH_LR)
def _(run):
    return batch_forces(run, 64)


BATCH_LONG = "batch_lr/2026-12-05-1e21c69"


def long_run(run, field, batch, epochs, rule="none"):
    return g(run.values("rows", field, batch=batch, epochs=epochs, rule=rule)[0])


@figure("batch-long-b1-forces", BATCH_LONG)
def _(run):
    return long_run(run, "force_rmse_mev_a", "1", "100")


@figure("batch-long-b16-forces", BATCH_LONG)
def _(run):
    return f"{long_run(run, 'force_rmse_mev_a', '16', '100', 'sqrt')} meV/Å"


@figure("batch-long-b16-none-forces", BATCH_LONG)
def _(run):
    return long_run(run, "force_rmse_mev_a", "16", "100")


@figure("batch-long-same-time-forces", BATCH_LONG)
def _(run):
    return (f"{long_run(run, 'force_rmse_mev_a', '16', '100', 'sqrt')} against "
            f"{long_run(run, 'force_rmse_mev_a', '1', '14')} meV/Å")


@figure("batch-long-same-time-energies", BATCH_LONG)
def _(run):
    return (f"{long_run(run, 'energy_rmse_mev_atom', '16', '100', 'sqrt')} against "
            f"{long_run(run, 'energy_rmse_mev_atom', '1', '14')} meV/atom")


def gpu_accuracy_line(run, batch, lr):
    """(frames/s, val E, val F) of the GPU check's train_accuracy run at `batch` and learning rate `lr`"""
    m = re.search(rf"^training accuracy, water se_e2_a, batch {batch}, lr {re.escape(lr)} to .*?: "
                  r"([0-9.]+) frames/s.*val E ([0-9.]+) meV/atom +F ([0-9.]+) meV/A", run.text("summary.txt"), re.M)
    if not m:
        raise SystemExit(f"figures.py: no train_accuracy line at batch {batch}, lr {lr} in {run.name}/summary.txt")
    return float(m[1]), float(m[2]), float(m[3])


@figure("gpu-1204-train-b1", "gpu-check/2026-12-04-33c9eba")
def _(run):
    return g(gpu_accuracy_line(run, 1, "2e-3")[0], 3)


@figure("gpu-1204-train-b16", "gpu-check/2026-12-04-33c9eba")
def _(run):
    return g(gpu_accuracy_line(run, 16, "2e-3")[0], 4)


@figure("gpu-1204-train-b16-forces", "gpu-check/2026-12-04-33c9eba")
def _(run):
    return f"{g(gpu_accuracy_line(run, 16, '2e-3')[2])} against batch 1's {g(gpu_accuracy_line(run, 1, '2e-3')[2])} meV/Å"


CMP_LATEST = "compare_stacks/2026-12-01-e8a03f9"


def cmp_ratios(run, stage, name, slowdown=True):
    """a compare_stacks row: the second build's median over the first's, and its ratios round by
    round (tables.round_ratios, the table's range); as a slowdown (frames/s inverted) unless asked not to"""
    rows = run.rows("rows", stage=stage, run=name)
    first, second = list(dict.fromkeys(r["build"] for r in run.rows("rows")))[:2]
    key = (stage, name, rows[0]["unit"])

    def median(build):
        return statistics.median(x for x in (tables.finite(r["value"]) for r in rows if r["build"] == build) if x is not None)
    whole = median(second) / median(first)
    rounds = tables.round_ratios(rows, key, second, first)
    if slowdown and stage == "train":
        return 1 / whole, [1 / x for x in rounds]
    return whole, rounds


def cmp_rows(run, stage=None):
    return list(dict.fromkeys((r["stage"], r["run"]) for r in run.rows("rows") if stage in (None, r["stage"])))


@figure("cmp-e8a03f9-worst", CMP_LATEST)
def _(run):
    worst = max(cmp_ratios(run, *k)[0] for k in cmp_rows(run))
    return f"{g(100 * (worst - 1), 2)}%"


@figure("cmp-e8a03f9-train-2-ranks", CMP_LATEST)
def _(run):
    whole, rounds = cmp_ratios(run, "train", "2 ranks x 1 thread", slowdown=False)
    return f"{whole:.2f}x, rounds {min(rounds):.2f}-{max(rounds):.2f}"


def slower_every_round(run):
    """how many of a compare_stacks run's rows the second build ran slower in every round"""
    keys = cmp_rows(run)
    slower = [k for k in keys if min(cmp_ratios(run, *k)[1]) > 1]
    return f"{len(slower) or 'none'} of the {len(keys)} rows"


figure("cmp-e8a03f9-slower-every-round", CMP_LATEST)(slower_every_round)


@figure("cmp-e8a03f9-train-2-threads", CMP_LATEST)
def _(run):
    return f"{cmp_ratios(run, 'train', '1 rank x 2 threads', slowdown=False)[0]:.2f}x"


@figure("cmp-e8ffefa-pair-1-rank", "compare_stacks/2026-12-01-e8ffefa")
def _(run):
    slower = [100 * (cmp_ratios(run, *k)[0] - 1) for k in cmp_rows(run, "pair") if k[1].endswith(", 1 rank")]
    return f"{min(slower):.0f}-{max(slower):.0f}%"


CMP_AFTER_MP_STEP = "compare_stacks/2026-12-03-0a7add3"


@figure("cmp-0a7add3-worst", CMP_AFTER_MP_STEP)
def _(run):
    worst = max(cmp_rows(run), key=lambda k: cmp_ratios(run, *k)[0])
    return f"{g(100 * (cmp_ratios(run, *worst)[0] - 1), 2)}% ({worst[0]}, {worst[1]})"


figure("cmp-0a7add3-slower-every-round", CMP_AFTER_MP_STEP)(slower_every_round)


def demo_force(run):
    return f"{demo_value(run, 'val_force_rmse_mev_a'):.1f} meV/Å"


def demo_epochs(run):
    return f"{demo_value(run, 'epochs'):.0f}"


figure("demo-val-force", DEMO)(demo_force)
figure("demo-before-val-force", DEMO_FRESH)(demo_force)
figure("demo-epochs", DEMO)(demo_epochs)


@figure("demo-before-md-speed", DEMO_FRESH)
def _(run):
    return f"{g(demo_value(run, 'md_us_per_atom_step'))} us/atom-step"


@figure("demo-before-epochs", DEMO_FRESH)
def _(run):
    return f"{demo_epochs(run)} epochs"


TTA = "time_to_accuracy/2026-12-01-3a3da7b"
TTA_OLD = "time_to_accuracy/2026-12-01-a2ac8da"
TTA_MLIP = "mlip-trainer, 1 process x 2 threads"
TTA_RECIPE = "mlip-trainer, its recipe, 2 ranks x 1 thread"
TTA_DEEPMD = "DeePMD-kit TF, its example, 1 process x 2 threads"


def tta(run, field, code, way="same model"):
    return run.med("rows", field, way=way, code=code)


@figure("tta-same-steps", TTA)
def _(run):
    return ratio(tta(run, "steps", TTA_MLIP), tta(run, "steps", TTA_DEEPMD))


@figure("tta-same-energy", TTA)
def _(run):
    return f"{g(tta(run, 'energy_rmse_mev_atom', TTA_MLIP))} against {g(tta(run, 'energy_rmse_mev_atom', TTA_DEEPMD))} meV/atom"


@figure("tta-same-force", TTA)
def _(run):
    return f"{g(tta(run, 'force_rmse_mev_a', TTA_MLIP))} against {g(tta(run, 'force_rmse_mev_a', TTA_DEEPMD))} meV/Å"


@figure("tta-recipe-force", TTA)
def _(run):
    return ratio(tta(run, "force_rmse_mev_a", TTA_RECIPE, "own recipe"), tta(run, "force_rmse_mev_a", TTA_DEEPMD, "own recipe"))


@figure("tta-noshift-force", TTA)
def _(run):
    return ratio(tta(run, "force_rmse_mev_a", TTA_MLIP, "same model, no shift"), tta(run, "force_rmse_mev_a", TTA_MLIP))


@figure("tta-old-force", TTA_OLD)
def _(run):
    return f"{g(tta(run, 'force_rmse_mev_a', TTA_MLIP))} against {g(tta(run, 'force_rmse_mev_a', TTA_DEEPMD))} meV/Å"


@figure("cmp-e498192-se-e2a", "compare_stacks/2026-12-04-e498192")
def _(run):
    whole, rounds = cmp_ratios(run, "potentials", "se_e2_a f64 1536 atoms")
    return f"{whole:.2f}x (rounds {min(rounds):.2f}-{max(rounds):.2f})"
