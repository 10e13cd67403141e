"""Figures of docs/benchmarks.md's "Data sets larger than memory" (bench_stream, bench_pack_scale),
and the streaming figures README.md quotes."""
import statistics

from figures import Run, figure, g

BIG = "bench_stream/2026-11-27-4bd2d5b-big"
# every run with pairs (SMALL_RUNS=paired: memory and streamed at the same time, a core each);
# a figure over all of them is registered with the last one, the others are cited by their tables
PAIRED = ("bench_stream/2026-11-27-1fe8994-paired", "bench_stream/2026-11-27-ab7e23d-paired10", BIG)
TURNS = "bench_stream/2026-11-27-1fe8994-paired"   # also ran each path alone, taking turns
ATOMS = "bench_pack_scale/2026-11-27-a071930"      # batches by atoms, format versions 2 and 1, cold cache


def gaps(run, memory, streamed):
    """pair by pair (one pair a repeat): how far streaming's frames/s is below memory's, in % of memory's"""
    fps = {}
    for r in run.rows("train", set="small"):
        fps.setdefault(r["repeat"], {})[r["mode"]] = float(r["frames_per_s"])
    return [100 * (f[memory] - f[streamed]) / f[memory] for f in fps.values() if memory in f and streamed in f]


def paired_gaps():
    return [x for name in PAIRED for x in gaps(Run(name), "memory-paired", "streamed-paired")]


@figure("stream-gap-median-pairs", BIG)
def _(run):
    return f"{g(statistics.median(paired_gaps()), 2)}%"


@figure("stream-pairs-count", BIG)
def _(run):
    return str(len(paired_gaps()))


@figure("stream-pairs-range", BIG)
def _(run):
    x = paired_gaps()
    return f"{g(min(x), 1)}-{g(max(x), 2)}%"


@figure("stream-pairs-within-aim", BIG)
def _(run):
    """how many pairs have streaming within 5% (the aim) of memory"""
    return str(sum(x <= 5 for x in paired_gaps()))


@figure("stream-gap-median-turns", TURNS)
def _(run):
    return f"{g(statistics.median(gaps(run, 'memory', 'streamed')), 2)}%"


def big_rows(run):
    return run.rows("train", set="big")


@figure("stream-big-peak-rss", BIG)
def _(run):
    """the largest peak RSS of any rank in any training run on the big set"""
    return f"{max(float(r['peak_rss_mib']) for r in big_rows(run)):.0f} MiB"


@figure("stream-big-first-step", BIG)
def _(run):
    """the latest first step of any training run on the big set"""
    return f"{g(max(float(r['first_step_s']) for r in big_rows(run)), 2)} s"


def size_gb(run, folder):
    """a line of sizes.txt (du -sb: bytes, path) whose path ends in folder"""
    for line in run.text("sizes.txt").splitlines():
        size, path = line.split("\t")
        if path.endswith("/" + folder):
            return f"{g(int(size) / 1e9, 3)} GB"
    raise SystemExit(f"figures: no {folder} in {run.name}/sizes.txt")


@figure("stream-big-size-gb", BIG)
def _(run):
    return size_gb(run, "big.pack")


@figure("stream-big-systems-gb", BIG)
def _(run):
    return size_gb(run, "big")


@figure("atoms-pass-per-million", ATOMS)
def _(run):
    """the first step's delay that grows with the frames (version 2 packs): the large pack's
    less the small one's, per 10^6 frames"""
    base, large = run.rows("train", pack="base"), run.rows("train", pack="copies")
    delay = run.med("train", "first_step_s", pack="copies") - run.med("train", "first_step_s", pack="base")
    return f"{g(delay / ((int(large[0]['frames']) - int(base[0]['frames'])) / 1e6), 2)} s"
