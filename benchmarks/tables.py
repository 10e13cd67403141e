#!/usr/bin/env python3
"""Every figure in README.md and docs/*.md, made from the runs kept under benchmarks/results/.

    benchmarks/tables.py RESULT_DIR           print every table one run gives
    benchmarks/tables.py --write [DOC...]     rewrite the tables and inline figures in the docs
    benchmarks/tables.py --check [DOC...]     exit 1 if the docs and the results disagree (ctest docs_tables)

A table in a doc sits between two markers that name the run and the kind of table:

    <!-- table: bench_deepmd/2026-11-26-1234567 md -->
    ...
    <!-- end table -->

A figure in prose sits between two markers that name it; benchmarks/figures/ says which run it
comes from and how (a median, a ratio of medians, a line of a summary):

    compressed se_e2_a is <!--fig pair-compressed-speedup-->3.4x<!--/fig--> faster

Every figure is the median of the run's repeats, with the smallest and largest in brackets where
there was more than one. No figure is typed by hand. --check also fails where
- a number with a unit of measurement (time, memory, rate, speed-up, %, error in eV) stands in
  prose outside these markers, or a decimal number in a table row outside a generated table,
  (a reference table's rows, whose first cell is a `key`, may hold plain decimals: defaults),
  unless it is marked as a fact from elsewhere, with its source:
      <!--quote https://doi.org/...-->2.6 us/atom-step<!--/quote-->
  or as a setting, default or test bound that the project chooses (not a measurement):
      trains for <!--set-->11 minutes<!--/set-->
- a cited run (a table, a figure, a link into benchmarks/results/) was made from a tree with
  uncommitted changes (its commit.txt lists changed files) or records no commit;
- a run folder under benchmarks/results/ is cited nowhere, or the folder outgrows RESULTS_MIB.
Code (fenced, indented, `inline`), link targets and HTML comments are not prose. Standard
library only.
"""
import csv
import math
import pathlib
import re
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- table: (\S+) (\S+) -->\n(.*?)<!-- end table -->\n", re.S)
FIGURE = re.compile(r"<!--fig (\S+?)-->(.*?)<!--/fig-->")  # +?: a figure "3.4x" then another on its line
QUOTE = re.compile(r"<!--quote (\S[^\n]*?)-->(.*?)<!--/quote-->", re.S)
SETTING = re.compile(r"<!--set-->(.*?)<!--/set-->", re.S)
# a number and a unit of measurement: time, memory, rates, per atom-step, speed-ups ("3.4x"), %, eV
_NUMBER = r"(?<![\w.^/])\d(?:[\d,]*\d)?(?:\.\d+)?(?:e[-+]?\d+)?"
_UNIT = (r"(?:(?:ns|µs|us|ms|s)/atom-step|frames/s|steps/s|[kMGT]?i?B/s|ns/day|(?:m|µ|k)?eV(?:/atom|/Å|/A)?"
         r"|ns|µs|us|ms|s|sec|seconds?|min|minutes?|h|hours?|days?|[kKMGT]i?B|%)")
MEASURED = re.compile(_NUMBER + r"(?:x(?![\w])|\s{0,4}" + _UNIT + r"(?![\w/]))")
TABLE_NUMBER = re.compile(r"(?<![\w.^/])(?<![A-Za-z] )\d+\.\d+(?![\w.])")  # not a version ("Kokkos 3.4")
RESULTS_MIB = 5


def read_tsv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f, delimiter="\t"))


def summary(values, digits=3, missing="failed"):
    """median (min-max) of the numbers among values; `missing` ('failed') for those that are not
    numbers, alone if none is; '-' (not applicable) if every value is '-'"""
    values = [v for v in values if v != "-"]
    if not values:
        return "-", None
    numbers = []
    for v in values:
        try:
            numbers.append(float(v))
        except ValueError:
            pass
    if not numbers:   # "oom": out of GPU memory (bench_mace.sh's mace-torch rows)
        return ("out of memory" if set(values) == {"oom"} else missing), None
    med = statistics.median(numbers)
    text = f"{med:.{digits}g}"
    if len(numbers) > 1:
        text += f" ({min(numbers):.{digits}g}-{max(numbers):.{digits}g})"
    if len(numbers) < len(values):
        text += f", {len(values) - len(numbers)} {missing}"
    return text, med


def grid(rows, row_key, col_keys, value, ref_row=None, col_name=None):
    """rows grouped by row_key (table rows, in order of appearance) and col_keys (columns); each
    cell the summary of `value` over the repeats, and its ratio to ref_row's median if given"""
    row_names, col_names, cells = [], [], {}
    for r in rows:
        rk, ck = r[row_key], tuple(r[k] for k in col_keys)
        if rk not in row_names:
            row_names.append(rk)
        if ck not in col_names:
            col_names.append(ck)
        cells.setdefault((rk, ck), []).append(r[value])
    medians = {key: summary(vals)[1] for key, vals in cells.items()}
    head = [col_name(c) if col_name else ", ".join(c) for c in col_names]
    out = ["| | " + " | ".join(head) + " |", "|---|" + "---|" * len(col_names)]
    for rk in row_names:
        line = []
        for ck in col_names:
            if (rk, ck) not in cells:
                line.append("-")
                continue
            text, med = summary(cells[(rk, ck)])
            ref = medians.get((ref_row, ck)) if ref_row else None
            if med is not None and ref:
                text += f" **{med / ref:.2f}x**"
            line.append(text)
        out.append(f"| {rk} | " + " | ".join(line) + " |")
    return "\n".join(out) + "\n"


def deepmd_md(run):
    rows = read_tsv(run / "md.tsv")
    return grid(rows, "model", ("atoms", "ranks"), "us_per_atom_step", ref_row="DeePMD-kit TF f64 compressed",
                col_name=lambda c: f"{c[0]} atoms, {c[1]} rank{'s' if c[1] != '1' else ''}")


def deepmd_train(run):
    rows = read_tsv(run / "train.tsv")
    for r in rows:
        r["what"] = "frames/s"
    return grid(rows, "code", ("what",), "frames_per_s", ref_row="DeePMD-kit TF")


def size_class(atoms):
    """water and bcc W boxes of one benchmark size differ in atoms: 1k, 10k, 100k, 1m"""
    try:
        n = int(atoms)
    except ValueError:
        return "-"
    return next(name for limit, name in ((3e3, "1k"), (3e4, "10k"), (3e5, "100k"), (float("inf"), "1m")) if n < limit)


def pair_rows(run):
    rows = read_tsv(run / "md.tsv")
    for r in rows:
        r["size"] = size_class(r["atoms"])
    return rows


def pair_md(run):
    return grid(pair_rows(run), "potential", ("size", "ranks"), "us_per_atom_step",
                col_name=lambda c: f"{c[0]}, {c[1]} rank{'s' if c[1] != '1' else ''}")


def pair_split(run):
    """where each run's step went (us/atom-step): the whole step, LAMMPS outside the pair style, and
    the pair style's own parts (`timing yes`); one column each, one row per run, size and ranks"""
    parts = (("us_per_atom_step", "total"), ("non_pair", "LAMMPS (non-pair)"), ("graph", "graph"),
             ("model", "model"), ("forces", "forces"))
    rows = [{"run": f"{r['potential']}, {r['size']}, {r['ranks']} rank{'s' if r['ranks'] != '1' else ''}",
             "part": name, "value": r[field]} for r in pair_rows(run) for field, name in parts]
    return grid(rows, "run", ("part",), "value")


def pair_memory(run):
    rows = [r for r in pair_rows(run) if r["ranks"] == "1"]
    return grid(rows, "potential", ("size",), "peak_rss_mib", col_name=lambda c: f"{c[0]}, MiB")


def threads(run):
    rows = read_tsv(run / "rows.tsv")
    return grid(rows, "build", ("threads",), "us_per_atom_step", col_name=lambda c: f"{c[0]} thread{'s' if c[0] != '1' else ''}")


def gpu_md_rows(run):
    """the MD rows of the GPU check (bench_pair.sh's markdown rows): run (with its chunk), atoms,
    us (us/atom-step), gpu (peak GPU MiB), stage (the check's stage), and the row's cells"""
    rows, chunk, stage = [], "", ""
    for line in (run / "md.txt").read_text().splitlines():
        if line.startswith("# "):  # a stage's header: its settings, CHUNK=N among them
            m = re.search(r"\bCHUNK=(\d+)", line)
            chunk = f", chunk {m[1]}" if m else ""
            stage = line[2:].split(" ")[0]
            continue
        f = [x.strip() for x in line.strip("|").split("|")]
        if line.startswith("|") and len(f) >= 11:
            us = f[4] if not f[4].startswith("failed") else \
                "failed: out of GPU memory" if "out of memory" in f[4] else "failed"
            rows.append({"run": f[0] + chunk, "atoms": f[1], "us": us, "gpu": f[10], "stage": stage, "cells": f})
    return rows


def gpu_md_groups(run):
    """the GPU check's MD rows by (stage, run, atoms): a run's timing windows together"""
    groups = {}
    for r in gpu_md_rows(run):
        groups.setdefault((r["stage"], r["run"], r["atoms"]), []).append(r)
    return groups


def gpu_md(run):
    """the MD rows of the GPU check: a run's timing windows (bench_pair.sh's WINDOWS, a row each)
    as the median (min-max) of its us/atom-step and the peak GPU memory of its process; a run of
    one window (the checks before 2026-11-29) as its row"""
    out = ["| run | atoms | us/atom-step | peak GPU MiB |", "|---|---|---|---|"]
    for (_, name, atoms), rs in gpu_md_groups(run).items():
        us = rs[0]["us"] if len(rs) == 1 else summary([r["us"] for r in rs], 4)[0]
        out.append(f"| {name} | {atoms} | {us} | {rs[-1]['gpu']} |")
    return "\n".join(out) + "\n"


def gpu_md_medians(run):
    """the GPU check's MD runs as (stage, run, atoms, median us/atom-step or None, median cells):
    a run's timing windows taken together, each numeric cell their median (a run's own row where
    it has one window or failed)"""
    out = []
    for (stage, name, atoms), rs in gpu_md_groups(run).items():
        cells = [summary([r["cells"][k] for r in rs])[1] if k >= 4 else rs[-1]["cells"][k]
                 for k in range(len(rs[-1]["cells"]))]
        out.append((stage, name, atoms, summary([r["us"] for r in rs])[1], cells))
    return out


# Issue 54's MD targets: (what, pattern of the runs' names, the size classes of size_class(), the
# most us/atom-step). Patterns are bench_pair.sh's labels on a GPU (" on cuda", then the path);
# its "100k" water box has 98304 atoms.
GPU_MD_TARGETS = (
    ("se_e2_a compressed float64, 100k atoms or more", r"mlip se_e2_a f64 compressed on cuda", ("100k", "1m"), 1.0),
    ("se_e2_a compressed float32, 100k atoms or more", r"mlip se_e2_a f32 compressed on cuda", ("100k", "1m"), 0.5),
    ("se_e2_a compressed float64, 10k atoms", r"mlip se_e2_a f64 compressed on cuda", ("10k",), 2.0),
    ("se_e2_a compressed float32, 10k atoms", r"mlip se_e2_a f32 compressed on cuda", ("10k",), 2.0),
    ("se_e2_a float32, 100k atoms or more", r"mlip se_e2_a f32 on cuda", ("100k", "1m"), 2.0),
    ("PaiNN 32 features, 3 layers, float32, 100k atoms or more", r"mlip painn 32f 3L f32 on cuda", ("100k", "1m"), 3.0),
)
# An "80 GB" card: the H100 80GB HBM3 of the kept checks, 81559 MiB by nvidia-smi.
CARD_80GB_MIB = 81559


def target_row(what, goal, measured, where, met):
    return f"| {what} | {goal} | {measured} | {where} | {'-' if met is None else 'yes' if met else 'no'} |"


def gpu_targets(run):
    """issue 54's targets against a GPU check: for each, the fastest run that measured it (the
    median of its windows), or that none did"""
    runs = gpu_md_medians(run)
    out = ["| target | goal | best measured | run (stage) | met |", "|---|---|---|---|---|"]
    for what, pattern, sizes, goal in GPU_MD_TARGETS:
        found = [r for r in runs if re.match(pattern, r[1]) and size_class(r[2]) in sizes and r[3] is not None]
        if not found:
            out.append(target_row(what, f"<= {goal} us/atom-step", "not measured", "-", None))
            continue
        stage, name, atoms, us, _ = min(found, key=lambda r: r[3])
        out.append(target_row(what, f"<= {goal} us/atom-step", f"{us:.3g}", f"{name}, {atoms} atoms ({stage})", us <= goal))
    out.append(host_share_target(runs))
    out.append(million_target(runs))
    out.append(training_target(run))
    return "\n".join(out) + "\n"


def host_share_target(runs):
    """the whole step's host parts (graph, forces) of its pair time, the least of its runs at 100k
    atoms or more"""
    what, goal = "host share of the pair time (the whole step on the GPU), 100k atoms or more", "<= 10%"
    shares = [(100 * (c[6] + c[8]) / (c[6] + c[7] + c[8]), name, atoms, stage) for stage, name, atoms, us, c in runs
              if "device graph, CUDA graph" in name and "CUDA graph eager" not in name
              and size_class(atoms) in ("100k", "1m") and all(isinstance(x, float) for x in c[6:9]) and sum(c[6:9]) > 0]
    if not shares:
        return target_row(what, goal, "not measured", "-", None)
    share, name, atoms, stage = min(shares)
    return target_row(what, goal, f"{share:.1f}%", f"{name}, {atoms} atoms ({stage})", share <= 10)


def million_target(runs):
    """about a million water atoms in float32 with no chunk, within an 80 GB card's memory: the
    fastest run that did, else the run that took the least memory, else one that failed
    (bench_pair.sh's failed rows have no atom count: the md_1m stage's float32 rows)"""
    what, goal = "about 1M water atoms, float32, no chunk", f"runs, peak GPU <= {CARD_80GB_MIB} MiB (an 80 GB H100)"
    f32 = [r for r in runs if re.match(r"mlip se_e2_a f32", r[1]) and ", chunk" not in r[1]]
    ran = [r for r in f32 if size_class(r[2]) == "1m" and r[3] is not None]
    fits = [r for r in ran if isinstance(r[4][10], float) and r[4][10] <= CARD_80GB_MIB]
    if fits:   # the fastest of those within the card's memory
        stage, name, atoms, us, c = min(fits, key=lambda r: r[3])
        return target_row(what, goal, f"{us:.3g} us/atom-step, {c[10]:.0f} MiB", f"{name}, {atoms} atoms ({stage})", True)
    if ran:   # else the one that took the least memory
        stage, name, atoms, us, c = min(ran, key=lambda r: r[4][10] if isinstance(r[4][10], float) else float("inf"))
        if not isinstance(c[10], float):
            return target_row(what, goal, f"{us:.3g} us/atom-step, GPU memory not sampled", f"{name}, {atoms} atoms ({stage})", None)
        return target_row(what, goal, f"{us:.3g} us/atom-step, {c[10]:.0f} MiB", f"{name}, {atoms} atoms ({stage})",
                          c[10] <= CARD_80GB_MIB)
    failed = [r for r in f32 if r[0].startswith("md_1m") and r[3] is None]
    if failed:
        return target_row(what, goal, "failed (the md table's rows of md_1m)", f"{failed[-1][1]} ({failed[-1][0]})", False)
    return target_row(what, goal, "not measured", "-", None)


def training_target(run):
    """issue 54's training target: the fastest train_accuracy run whose last epoch's validation
    errors (energy and forces) are no worse than batch 1's after the same epochs (the same frames);
    without batch 1's errors the train stage's fastest rate, which cannot decide it (its runs of 2
    epochs measure no accuracy). A second row, not the issue's criterion: the same in no more than
    batch 1's wall time (epochs / rate), where a run of more epochs than batch 1's says so"""
    what, goal = "training se_e2_a water, validation errors no worse than batch 1's", ">= 1000 frames/s"
    pattern = (r"training accuracy, .*?batch (\d+), lr ([^ ,]+) to ([^ ,]+), (\d+) epochs, .*?: ([0-9.]+) frames/s"
               r".*val E ([0-9.]+) meV/atom +F ([0-9.]+) meV/A")
    runs = [(int(m[1]), f"{m[2]} to {m[3]}", int(m[4]), float(m[5]), float(m[6]), float(m[7]))
            for m in summary_matches(run, pattern)]
    base = [r for r in runs if r[0] == 1]
    if not base:
        rates = [(float(m[2]), m[1]) for m in summary_matches(run, r"training (?!accuracy)(se_e2_a water.*): ([0-9.]+) frames/s")]
        if not rates:
            return target_row(what, goal, "not measured", "-", None)
        rate, name = max(rates)
        return target_row(what, goal, f"{rate:g}, errors not measured against batch 1's", name, None)
    _, _, n1, rate1, e1, f1 = base[0]
    rows = []
    for label, fits in ((f"{what}, after the same frames", lambda r: r[2] == n1),
                        (f"{what}, in batch 1's wall time (not the issue's criterion)",
                         lambda r: r[2] / r[3] <= 1.05 * n1 / rate1)):
        batch, lr, epochs, rate, e, f = max((r for r in runs if fits(r) and r[4] <= e1 and r[5] <= f1), key=lambda r: r[3])
        rows.append(target_row(label, goal, f"{rate:g} (val E {e:g}, F {f:g}; batch 1: {e1:g}, {f1:g}, {n1} epochs)",
                               f"accuracy run, batch {batch}, lr {lr}, {epochs} epochs", rate >= 1000))
    return "\n".join(rows)


def summary_rows(rows, key, columns):
    """one row per distinct key(r), in order of appearance: the key's cells, then for each
    (field, digits[, missing]) of columns the summary of that field over the key's rows"""
    keys = []
    for r in rows:
        if key(r) not in keys:
            keys.append(key(r))
    out = []
    for k in keys:
        sub = [r for r in rows if key(r) == k]
        cells = [summary([r[c[0]] for r in sub], *c[1:])[0] for c in columns]
        out.append("| " + " | ".join([*k, *cells]) + " |")
    return out


def finite(text):
    """text as a finite number, or None (a failed run's "failed", "", nan)"""
    try:
        x = float(text)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def round_ratios(rows, key, build, first):
    """build's figure over the first build's, round by round (the rounds both measured)"""
    def by_round(b):
        values = {r["round"]: finite(r["value"]) for r in rows if (r["stage"], r["run"], r["unit"]) == key and r["build"] == b}
        return {k: v for k, v in values.items() if v is not None}
    mine, ref = by_round(build), by_round(first)
    return [mine[k] / ref[k] for k in mine if k in ref and ref[k] > 0]


def compare_builds(run):
    """compare_stacks.sh: a row per figure (stage, run), a column per build (in the order given):
    median (min-max) over the rounds, each build's median over the first build's, and the range of
    its per-round ratios to the first build (the two ran in the same round, one after the other)"""
    rows = read_tsv(run / "rows.tsv")
    builds = list(dict.fromkeys(r["build"] for r in rows))
    out = ["| stage | run | unit | " + " | ".join(builds) + " |", "|---|---|---|" + "---|" * len(builds)]
    for key in dict.fromkeys((r["stage"], r["run"], r["unit"]) for r in rows):
        cells, ref = [], None
        for k, b in enumerate(builds):
            text, med = summary([r["value"] for r in rows if (r["stage"], r["run"], r["unit"]) == key and r["build"] == b])
            if k == 0:
                ref = med
            elif med is not None and ref:
                text += f" **{med / ref:.2f}x**"
                ratios = round_ratios(rows, key, b, builds[0])
                if len(ratios) > 1:
                    text += f" (rounds {min(ratios):.2f}-{max(ratios):.2f})"
            cells.append(text)
        out.append("| " + " | ".join([*key, *cells]) + " |")
    return "\n".join(out) + "\n"


def time_to_accuracy(run):
    """per way and code: the test errors and steps over the repeats"""
    rows = read_tsv(run / "rows.tsv")
    out = ["| way | code | energy RMSE (meV/atom) | force RMSE (meV/Å) | steps | training wall (s) |",
           "|---|---|---|---|---|---|"]
    out += summary_rows(rows, lambda r: (r["way"], r["code"]),
                        (("energy_rmse_mev_atom", 3), ("force_rmse_mev_a", 3), ("steps", 5), ("wall_s", 4)))
    return "\n".join(out) + "\n"


def mp_accuracy(run):
    """per model: steps, best validation and test errors and MD cost over the repeats"""
    rows = read_tsv(run / "rows.tsv")
    out = ["| model | steps | best validation E (meV/atom) | best validation F (meV/Å) | test E RMSE (meV/atom) | "
           "test F RMSE (meV/Å) | MD µs/atom-step (1 rank, 1536 atoms) |", "|---|---|---|---|---|---|---|"]
    out += summary_rows(rows, lambda r: (r["model"],),
                        (("steps", 5), ("val_e_mev_atom", 3), ("val_f_mev_a", 3), ("test_e_mev_atom", 3),
                         ("test_f_mev_a", 3), ("md_us_per_atom_step", 3)))
    return "\n".join(out) + "\n"


def batch_lr(run):
    """per batch and learning-rate rule: the rate, steps, test errors and CPU frames/s over the repeats"""
    rows = read_tsv(run / "rows.tsv")
    epochs = "epochs" in rows[0]   # runs since 2026-12-05 give each row its epochs (batch B@E)
    out = ["| batch (frames) | " + ("epochs | " if epochs else "") + "lr rule | lr | optimiser steps | "
           "test E RMSE (meV/atom) | test F RMSE (meV/Å) | frames/s (CPU, 2 threads) |",
           "|---|---|---|---|---|---|---|" + ("---|" if epochs else "")]
    out += summary_rows(rows, lambda r: (r["batch"],) + ((r["epochs"],) if epochs else ()) +
                        (r["rule"], f"{float(r['lr']):.3g}"),
                        (("steps", 5), ("energy_rmse_mev_atom", 3), ("force_rmse_mev_a", 3), ("frames_per_s", 3)))
    return "\n".join(out) + "\n"


def multihead_replay(run):
    """test errors of the base, the single-head fine-tune and the multi-head one's heads"""
    rows = read_tsv(run / "rows.tsv")
    for r in rows:
        r["energy"], r["forces"] = r["energy_rmse_mev_per_atom"], r["force_rmse_mev_per_a"]
    energy = grid(rows, "model", ("test",), "energy", col_name=lambda c: f"{c[0]}: E RMSE, meV/atom")
    forces = grid(rows, "model", ("test",), "forces", col_name=lambda c: f"{c[0]}: F RMSE, meV/Å")
    return forces + "\n" + energy


def fine_tuning(run):
    """per run: wall time, time to the scratch run's best validation force error, and errors"""
    rows = read_tsv(run / "rows.tsv")
    target = summary([r["target_f_mev_a"] for r in rows if r["run"].startswith("from scratch")], 4)[0]
    out = [f"Target: each repeat's best validation force RMSE from scratch, {target} meV/Å.", "",
           "| run | training wall (s) | time to the target (s) | best validation E (meV/atom) | "
           "best validation F (meV/Å) | test E RMSE (meV/atom) | test F RMSE (meV/Å) |", "|---|---|---|---|---|---|---|"]
    out += summary_rows(rows, lambda r: (r["run"],),
                        (("wall_s", 3), ("time_to_target_s", 3, "not reached"), ("val_e_mev_atom", 3),
                         ("val_f_mev_a", 3), ("test_e_mev_atom", 3), ("test_f_mev_a", 3)))
    return "\n".join(out) + "\n"


def nve_drift(run):
    rows = read_tsv(run / "rows.tsv")
    out = ["| model | NVE (ps) | max \\|E(t) - E(0)\\| / N (meV/atom) | drift (meV/atom/ps) | T (K) | us/atom-step | molecules |",
           "|---|---|---|---|---|---|---|"]
    for r in rows:
        intact = "every H2O intact" if r["thermo_lines_not_intact"] == "0" else f"broken at {r['thermo_lines_not_intact']} thermo lines"
        out.append(f"| {r['model']} | {r['ps']} | {r['max_abs_de_mev_atom']} | {r['slope_mev_atom_ps']} | "
                   f"{r['t_min_k']}-{r['t_max_k']} | {r['us_per_atom_step']} | {intact} |")
    return "\n".join(out) + "\n"


def summary_matches(run, pattern):
    """the GPU check's summary lines that start with `pattern` (a regular expression), as matches"""
    lines = (run / "summary.txt").read_text().splitlines()
    return [m for m in (re.match(pattern, line) for line in lines) if m]


def dry_run(run):
    """whether a GPU check's folder holds a dry run (on the CPU, small sizes: no GPU figures)"""
    summary = run / "summary.txt"
    return summary.is_file() and any(line.startswith("mode: dry run") for line in summary.read_text().splitlines())


def gpu_training(run):
    """the training lines of the GPU check's summary (one run each; train_accuracy's: accuracy)"""
    out = ["| training run | frames/s |", "|---|---|"]
    for m in summary_matches(run, r"training (?!accuracy)(.*): (\S+) frames/s"):
        out.append(f"| {m[1]} | {m[2]} |")
    return "\n".join(out) + "\n"


def gpu_accuracy(run):
    """the check's train_accuracy lines: frames/s and the last epoch's validation errors per batch
    and learning rate (one run each)"""
    out = ["| batch | learning rate | epochs | frames/s | validation E (meV/atom) | validation F (meV/A) |",
           "|---|---|---|---|---|---|"]
    pattern = r"training accuracy, .*?batch (\d+), lr ([^ ,]+)(?: to ([^ ,]+))?(?:, (\d+) epochs, .*?: (\S+) frames/s|: failed after (\d+) epoch)(.*)"
    for m in summary_matches(run, pattern):
        e = re.search(r"val E (\S+) meV/atom +F (\S+) meV/A", m[7])   # also n/a or inf
        lr = f"{m[2]} to {m[3]}" if m[3] else m[2]
        epochs, rate = (m[4], m[5]) if m[4] else (m[6], "failed: see the summary")
        out.append(f"| {m[1]} | {lr} | {epochs} | {rate} | {e[1] if e else '-'} | {e[2] if e else '-'} |")
    return "\n".join(out) + "\n"


def gpu_memory(run):
    """the check's memory lines (sizing in gpu-check.sh, in the order the log has them): per stage
    and run, the GPU memory a model call took (the most seen: the end-of-run line, else the largest
    of the sizer's lines) and the local atoms per call the sizer chose last; a committee's lines
    (all its models in a call) are a row of their own"""
    cells = {}
    for m in summary_matches(run, r"memory: (\S+): (\S+): \d+ (.*)"):
        name = f"{m[2]}, all the committee's models" if "of all the committee's models" in m[3] else m[2]
        c = cells.setdefault((m[1], name), {"kib": [], "edge": [], "per_call": "-"})
        k = re.search(r"([0-9.]+) KiB per centre atom,? \(?([0-9.]+) bytes per edge", m[3])
        if k:
            c["kib"].append(float(k[1]))
            c["edge"].append(float(k[2]))
        p = re.search(r" (\d+) of (\d+) local atoms per call", m[3])
        if p:
            c["per_call"] = f"{p[1]} of {p[2]}"
    out = ["| stage | run | KiB per centre atom | bytes per edge | local atoms per call (last) |", "|---|---|---|---|---|"]
    for (stage, name), c in cells.items():
        kib = f"{max(c['kib']):.1f}" if c["kib"] else "-"
        edge = f"{max(c['edge']):.0f}" if c["edge"] else "-"
        out.append(f"| {stage} | {name} | {kib} | {edge} | {c['per_call']} |")
    return "\n".join(out) + "\n"


def gpu_profile(run):
    """the check's profile lines: per run, the wall time of a force call or step, the GPU's busy time
    and share of it, and the host's launches and waits (the profiler slows what it watches: shares,
    not figures)"""
    out = ["| run | wall ms | GPU busy ms (share) | kernels | host launches | host waits (ms) | host operators' self ms |",
           "|---|---|---|---|---|---|---|"]
    for m in summary_matches(run, r"profile: (.+?): wall ([0-9.]+) ms per (\w+)(.*)"):
        rest = m[4]
        g = re.search(r"GPU busy ([0-9.]+) ms \(([0-9]+)% of the wall: ([0-9.]+) kernels", rest)
        h = re.search(r"host: ([0-9.]+) launches, ([0-9.]+) waits for the GPU taking ([0-9.]+) ms", rest)
        o = re.search(r"host operators' self time ([0-9.]+) ms", rest)
        busy = f"{g[1]} ({g[2]}%)" if g else ("none recorded" if "no GPU activity" in rest else "-")
        out.append(f"| {m[1]} (per {m[3]}) | {m[2]} | {busy} | {g[3] if g else '-'} | {h[1] if h else '-'} | "
                   f"{f'{h[2]} ({h[3]})' if h else '-'} | {o[1] if o else '-'} |")
    return "\n".join(out) + "\n"


def mace_label(r):
    """a row of bench_mace's train.tsv or md.tsv as the tables name it (runs before DEVICE: cpu)"""
    plural = lambda n, what: f"{n} {what}{'s' if n != '1' else ''}"
    device = r.get("device") or "cpu"
    where = "" if device == "cpu" else f", {device}"
    if r["code"] == "mlip":
        return f"mlip{' (LAMMPS)' if 'atoms' in r else ''}, {plural(r['ranks'], 'rank')} x {plural(r['threads'], 'thread')}{where}"
    route = {"mace-torch": " (ASE)", "mace-torch-graph": " (model call, graph built once)"}[r["code"]] if "atoms" in r else ""
    ranks = "" if "atoms" in r else f"{plural(r['ranks'], 'rank')} x "
    return f"mace-torch{route}, {ranks}{plural(r['threads'], 'thread')}{where}"


def mace_train(run):
    rows = read_tsv(run / "train.tsv")
    for r in rows:
        r["label"] = mace_label(r)
        r["what"] = "frames/s"
    return grid(rows, "label", ("what",), "frames_per_s",
                ref_row=next((r["label"] for r in rows if r["code"] == "mace-torch" and r["threads"] == "1"), None))


def mace_md(run):
    rows = read_tsv(run / "md.tsv")
    for r in rows:
        r["label"] = mace_label(r)
    ref = [r["label"] for code in ("mace-torch", "mace-torch-graph") for r in rows if r["code"] == code and r["threads"] == "1"]
    speed = grid(rows, "label", ("atoms",), "us_per_atom_step", ref_row=ref[0] if ref else None,
                 col_name=lambda c: f"{c[0]} atoms, us/atom-step")
    memory = grid(rows, "label", ("atoms",), "peak_rss_mib", col_name=lambda c: f"{c[0]} atoms, peak MiB")
    if any(r.get("peak_gpu_mib", "-") not in ("", "-") for r in rows):
        memory += "\n" + grid(rows, "label", ("atoms",), "peak_gpu_mib", col_name=lambda c: f"{c[0]} atoms, peak GPU MiB")
    return speed + "\n" + memory


def mace_memory(run):
    rows = read_tsv(run / "memory.tsv")
    for r in rows:
        r["label"] = f"mlip (LAMMPS), {r['ranks']} rank{'s' if r['ranks'] != '1' else ''}"
    speed = grid(rows, "label", ("atoms",), "us_per_atom_step", col_name=lambda c: f"{c[0]} atoms, us/atom-step")
    memory = grid(rows, "label", ("atoms",), "peak_rss_mib", col_name=lambda c: f"{c[0]} atoms, peak MiB per rank")
    return speed + "\n" + memory


def mace_accuracy(run):
    rows = read_tsv(run / "accuracy.tsv")
    if rows and "repeat" in rows[0]:   # repeated runs: per code, median (min-max) over the repeats
        lines = ["| code | runs | minutes | epochs | energy RMSE, meV/atom | force RMSE, meV/Å |",
                 "|---|---|---|---|---|---|"]
        for r in rows:   # the baseline is fitted, not trained
            if r["code"] == "E0-baseline":
                r["minutes"] = r["epochs"] = "-"
        runs = lambda code: str(sum(r["code"] == code for r in rows))
        lines += summary_rows(rows, lambda r: (r["code"], runs(r["code"])),
                              (("minutes", 3), ("epochs", 3), ("energy_rmse_mev_per_atom", 4),
                               ("force_rmse_mev_per_a", 3)))
        return "\n".join(lines) + "\n"
    lines = ["| code | minutes | epochs | energy RMSE, meV/atom | force RMSE, meV/Å |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['code']} | {r['minutes']} | {r['epochs']} | {float(r['energy_rmse_mev_per_atom']):.3g} | "
                     f"{float(r['force_rmse_mev_per_a']):.3g} |")
    return "\n".join(lines) + "\n"


def exchange_md(run):
    """halo against exchange: per (atoms, L, ranks) the medians of both paths side by side"""
    rows = read_tsv(run / "exchange.tsv")
    keys, cells = [], {}
    for r in rows:
        k = (r["atoms"], r["layers"], r["ranks"])
        if k not in keys:
            keys.append(k)
        cells.setdefault(k + (r["path"],), []).append(r)
    out = ["| atoms | L | ranks | halo µs/atom-step | exchange µs/atom-step | halo / exchange | peak MiB per rank, "
           "halo / exchange | ghosts per rank, halo / exchange | MB sent per rank per step, halo / exchange |",
           "|---|---|---|---|---|---|---|---|---|"]
    for k in keys:
        halo, exch = cells.get(k + ("halo",), []), cells.get(k + ("exchange",), [])
        h_text, h = summary([r["us_per_atom_step"] for r in halo], 4)
        e_text, e = summary([r["us_per_atom_step"] for r in exch], 4)
        ratio = f"**{h / e:.1f}x**" if h and e else "-"
        peak = " / ".join(summary([r["peak_rss_mib"] for r in side], 4)[0] for side in (halo, exch))
        # ghosts and bytes follow from the geometry: the same in every repeat (their median)
        same = lambda f, fmt: " / ".join(format(summary([r[f] for r in side])[1], fmt) for side in (halo, exch))
        out.append(f"| {k[0]} | {k[1]} | {k[2]} | {h_text} | {e_text} | {ratio} | {peak} | "
                   f"{same('ghosts_per_rank', '.0f')} | {same('mb_sent_per_rank_step', '.3g')} |")
    return "\n".join(out) + "\n"


def exchange_cost(run):
    """benchmarks/cost_model.py on the run's medians: the 1-rank rows of L = 3 at the largest size"""
    import subprocess
    import tempfile
    rows = [r for r in read_tsv(run / "exchange.tsv") if r["layers"] == "3" and r["ranks"] == "1"]
    atoms = max(int(r["atoms"]) for r in rows)
    lines = []
    for path in ("halo", "exchange"):
        med = summary([r["us_per_atom_step"] for r in rows if r["path"] == path and int(r["atoms"]) == atoms])[1]
        lines.append(f"{path} 3 {atoms} 1 {med}")
    with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
        f.write("\n".join(lines) + "\n")
        f.flush()
        text = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "cost_model.py"), "--layers", "3",
                               "--measured", f.name], check=True, capture_output=True, text=True).stdout
    return f"Measured input (medians): {'; '.join(lines)} (path L atoms ranks µs/atom-step).\n\n" + text


def mp_cost(run):
    """PaiNN against se_e2_a: per (atoms, ranks, dtype) and model, medians and the ratio to se_e2_a"""
    rows = read_tsv(run / "cost.tsv")
    for r in rows:
        r["case"] = f"{r['atoms']} atoms, {r['ranks']} rank{'s' if r['ranks'] != '1' else ''}, {r['dtype']}"
    out = ["| case | model | us/atom-step | / se_e2_a | peak MiB per rank |", "|---|---|---|---|---|"]
    keys, cells = [], {}
    for r in rows:
        k = (r["case"], r["model"])
        if k not in keys:
            keys.append(k)
        cells.setdefault(k, []).append(r)
    for case, model in keys:
        us_text, us = summary([r["us_per_atom_step"] for r in cells[(case, model)]], 4)
        base = summary([r["us_per_atom_step"] for r in cells.get((case, "se_e2_a"), [])])[1]
        ratio = f"**{us / base:.2f}x**" if us and base else "-"
        peak = summary([r["peak_rss_mib"] for r in cells[(case, model)]], 4)[0]
        out.append(f"| {case} | {model} | {us_text} | {ratio} | {peak} |")
    return "\n".join(out) + "\n"


def stream_train(run):
    """training frames/s, time to the first step and peak RSS, per data set, path and ranks"""
    rows = read_tsv(run / "train.tsv")
    for r in rows:
        r["label"] = (f"{'the big set' if r['set'] == 'big' else 'the small set'} ({int(r['frames']):,} frames), "
                      f"{r['mode'].replace('-noprefetch', ' (data.prefetch 0)').replace('-unbound', ' (mpirun --bind-to none)').replace('-paired', ' (paired: both at once, a core each)')}, "
                      f"{r['ranks']} rank{'s' if r['ranks'] != '1' else ''}")
    out = ["| run | frames/s | first step (s) | peak RSS per rank (MiB) |", "|---|---|---|---|"]
    out += summary_rows(rows, lambda r: (r["label"],), (("frames_per_s", 3), ("first_step_s", 2), ("peak_rss_mib", 4)))
    return "\n".join(out) + "\n"


def stream_pack(run):
    """pack and pack --verify of the big set (one run each)"""
    if not (run / "pack.tsv").exists():
        return "(this run packed no big set: FRAMES=0)\n"
    rows = read_tsv(run / "pack.tsv")
    out = ["| step | frames | seconds | frames/s | MB/s | peak RSS (MiB) |", "|---|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['step']} | {int(r['frames']):,} | {float(r['seconds']):.0f} | {float(r['frames_per_s']):.0f} | "
                   f"{float(r['mb_per_s']):.1f} | {r['peak_rss_mib']} |")
    return "\n".join(out) + "\n"


def scale_train(run):
    """streamed training frames/s, time to the first step and peak RSS, per pack size"""
    rows = read_tsv(run / "train.tsv")
    for r in rows:
        name = r["pack"].removesuffix("-baseline")
        r["label"] = (f"{int(r['frames']):,} frames" + (", format version 1" if name.endswith("-v1") else "") +
                      (", baseline build" if r["pack"].endswith("-baseline") else ""))
    out = ["| pack | frames/s | first step (s) | peak RSS (MiB) |", "|---|---|---|---|"]
    out += summary_rows(rows, lambda r: (r["label"],), (("frames_per_s", 3), ("first_step_s", 2), ("peak_rss_mib", 4)))
    return "\n".join(out) + "\n"


def scale_pack(run):
    """the packs of the scaling run (one run each)"""
    rows = read_tsv(run / "pack.tsv")
    out = ["| pack | frames | seconds | frames/s | GB |", "|---|---|---|---|---|"]
    for r in rows:
        out.append(f"| {r['name']} | {int(r['frames']):,} | {float(r['seconds']):.1f} | {float(r['frames_per_s']):.0f} | "
                   f"{int(r['bytes']) / 1e9:.2f} |")
    return "\n".join(out) + "\n"


KINDS = {
    ("bench_pack_scale", "train"): scale_train,
    ("bench_pack_scale", "pack"): scale_pack,
    ("bench_stream", "train"): stream_train,
    ("bench_stream", "pack"): stream_pack,
    ("bench_mp_cost", "md"): mp_cost,
    ("bench_exchange", "md"): exchange_md,
    ("bench_exchange", "cost"): exchange_cost,
    ("bench_mace", "train"): mace_train,
    ("bench_mace", "md"): mace_md,
    ("bench_mace", "memory"): mace_memory,
    ("bench_mace", "accuracy"): mace_accuracy,
    ("bench_deepmd", "md"): deepmd_md,
    ("bench_deepmd", "train"): deepmd_train,
    ("bench_pair", "md"): pair_md,
    ("bench_pair", "memory"): pair_memory,
    ("bench_pair", "split"): pair_split,
    ("threads-compressed", "speed"): threads,
    ("gpu-check", "md"): gpu_md,
    ("gpu-check", "training"): gpu_training,
    ("gpu-check", "accuracy"): gpu_accuracy,
    ("gpu-check", "memory"): gpu_memory,
    ("gpu-check", "profile"): gpu_profile,
    ("gpu-check", "targets"): gpu_targets,
    ("time_to_accuracy", "errors"): time_to_accuracy,
    ("nve_drift", "drift"): nve_drift,
    ("mp_accuracy", "errors"): mp_accuracy,
    ("fine_tuning", "errors"): fine_tuning,
    ("multihead_replay", "errors"): multihead_replay,
    ("batch_lr", "errors"): batch_lr,
    ("compare_stacks", "builds"): compare_builds,
}


def make(name, kind):
    bench = name.split("/")[0]
    if (bench, kind) not in KINDS:
        raise SystemExit(f"tables.py: no table '{kind}' for benchmark '{bench}' (known: {sorted(KINDS)})")
    run = RESULTS / name
    if not run.is_dir():
        raise SystemExit(f"tables.py: no results folder {run}")
    if bench == "gpu-check" and dry_run(run):
        raise SystemExit(f"tables.py: {name} is a dry run of the GPU check (on the CPU, small sizes): no GPU figures for the docs")
    return KINDS[(bench, kind)](run)


def fresh_tables(text):
    return MARKER.sub(lambda m: f"<!-- table: {m[1]} {m[2]} -->\n{make(m[1], m[2])}<!-- end table -->\n", text)


def fresh_figures(text, where, errors):
    """text with each figure made anew; a figure that cannot be made stays, its error in errors"""
    import figures
    figures.load()

    def fresh(m):
        if m[1] not in figures.FIGURES:
            errors.append(f"{where}: no figure '{m[1]}' in benchmarks/figures/")
            return m[0]
        try:
            return f"<!--fig {m[1]}-->{figures.make(m[1])}<!--/fig-->"
        except (SystemExit, OSError, LookupError, ValueError) as e:
            errors.append(f"{where}: figure '{m[1]}' from {figures.FIGURES[m[1]][0]}: {e}")
            return m[0]

    return FIGURE.sub(fresh, text)


def docs(paths, write):
    differs, errors = [], []
    for path in paths:
        text = path.read_text()
        new = fresh_figures(fresh_tables(text), path.relative_to(ROOT), errors)
        if new != text:
            differs.append(path)
            if write:
                path.write_text(new)
    for path in differs:
        print(f"tables.py: {path.relative_to(ROOT)}: {'rewritten' if write else 'a table or figure differs from its results (benchmarks/tables.py --write)'}")
    for e in errors:
        print(f"tables.py: {e}")
    return 1 if errors or (differs and not write) else 0


def prose(text):
    """text with everything that is not prose blanked (lines kept, so line numbers hold)"""
    blank = lambda m: re.sub(r"[^\n]", " ", m[0])
    text = MARKER.sub(blank, text)
    # docs/pair_style.md's keyword table, made from pair_style/pair_mlip_keywords.cpp (ctest test_pair_keywords)
    text = re.sub(r"<!-- keywords: .*?<!-- end keywords -->", blank, text, flags=re.S)
    for pattern in (FIGURE, QUOTE, SETTING):
        text = pattern.sub(blank, text)
    text = re.sub(r"^( *)(```|~~~).*?^\1\2[^\n]*$", blank, text, flags=re.S | re.M)
    text = re.sub(r"<!--.*?-->", blank, text, flags=re.S)
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if line.startswith("    ") and not re.match(r" *([-*+]|\d+\.) ", line) and (i == 0 or not lines[i - 1].strip() or lines[i - 1].startswith("    ")):
            lines[i] = " " * len(line)  # an indented code block (after a blank line or more code)
    text = "\n".join(lines)
    text = re.sub(r"`[^`\n]*`", blank, text)
    return re.sub(r"\]\([^)\s]*\)", blank, text)


def unmarked(path):
    """(line, text) of each figure typed by hand in a doc's prose (a figure may wrap a line)"""
    text = path.read_text()
    raw, clean = text.split("\n"), prose(text)
    line_of = lambda offset: clean.count("\n", 0, offset) + 1
    found = [(line_of(m.start()), " ".join(m[0].split())) for m in MEASURED.finditer(clean)]
    for n, line in enumerate(clean.split("\n"), 1):
        # a row of a reference table (its first cell a `key`: settings and defaults) may hold
        # plain decimals; other hand-typed rows are measurements
        if line.lstrip().startswith("|") and not re.match(r"\s*\|\s*`", raw[n - 1]):
            found += [(n, m[0]) for m in TABLE_NUMBER.finditer(line) if not any(n == k and m[0] in h for k, h in found)]
    return sorted(found)


def cited_runs(paths):
    """{run name: [where]} of every run a doc cites (tables, figures, links)"""
    import figures
    figures.load()
    cited = {}
    for path in paths:
        text = path.read_text()
        where = str(path.relative_to(ROOT))
        for m in MARKER.finditer(text):
            cited.setdefault(m[1], []).append(where)
        for m in FIGURE.finditer(text):
            if m[1] in figures.FIGURES:
                cited.setdefault(figures.FIGURES[m[1]][0], []).append(where)
        for m in re.finditer(r"benchmarks/results/([\w.-]+/[\w.-]+)", text):
            cited.setdefault(m[1], []).append(where)
    return cited


def run_problem(name):
    """why a run may not be cited, or None"""
    run = RESULTS / name
    if not run.is_dir():
        return "no such folder"
    commit = run / "commit.txt"
    if not commit.is_file():
        return "no commit.txt (the commit and the tree's changes the run was made from)"
    lines = [l for l in commit.read_text().splitlines() if l.strip()]
    if not lines or not re.match(r"[0-9a-f]{7,40}\b", lines[0]):
        return "commit.txt names no commit"
    if len(lines) > 1 or name.endswith("-dirty"):
        return "made from a tree with uncommitted changes (commit.txt): a dirty run is not cited"
    return None


def all_runs():
    return sorted(f"{b.name}/{r.name}" for b in RESULTS.iterdir() if b.is_dir() for r in b.iterdir() if r.is_dir())


def check(paths):
    import figures
    figures.load()
    problems = []
    for path in paths:
        problems += [f"{path.relative_to(ROOT)}:{n}: '{h}' is typed by hand: generate it (<!--fig NAME-->, "
                     f"benchmarks/figures/), or mark it <!--quote SOURCE--> or <!--set-->" for n, h in unmarked(path)]
    if set(paths) == set(DOCS):
        cited = cited_runs(paths)
        problems += [f"{', '.join(sorted(set(w)))}: cites {name}: {why}" for name, w in cited.items()
                     if (why := run_problem(name))]
        problems += [f"benchmarks/results/{name}: cited nowhere in README.md or docs/ (remove it)"
                     for name in all_runs() if name not in cited]
        used = {m[1] for path in paths for m in FIGURE.finditer(path.read_text())}
        problems += [f"benchmarks/figures/: figure '{name}' is used in no doc" for name in figures.FIGURES if name not in used]
        size = sum(f.stat().st_size for f in RESULTS.rglob("*") if f.is_file()) / 2**20
        if size > RESULTS_MIB:
            problems.append(f"benchmarks/results: {size:.1f} MiB, more than {RESULTS_MIB} (trim the logs)")
    for p in problems:
        print(f"tables.py: {p}")
    return 1 if problems else 0


def main(argv):
    if argv and argv[0] in ("--write", "--check"):
        paths = [pathlib.Path(p).resolve() for p in argv[1:]] or DOCS
        status = docs(paths, argv[0] == "--write")
        return check(paths) or status if argv[0] == "--check" else status
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    run = pathlib.Path(argv[0]).resolve()
    name = f"{run.parent.name}/{run.name}"
    owner = (run / "benchmark.txt").read_text().strip() if (run / "benchmark.txt").is_file() else run.parent.name
    if owner == "gpu-check" and dry_run(run):
        print(f"<!-- {name}: a dry run of the GPU check, on the CPU at small sizes: not GPU figures -->\n")
    for (bench, kind), table in KINDS.items():
        if bench != owner:
            continue
        try:   # a run of some parts only (bench_mace's PARTS) has some tables only
            text = table(run)
        except FileNotFoundError as missing:
            print(f"<!-- {name} {kind}: not in this run (no {pathlib.Path(missing.filename).name}) -->\n")
            continue
        print(f"<!-- table: {name} {kind} -->\n{text}<!-- end table -->\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
