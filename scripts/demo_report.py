#!/usr/bin/env python3
"""Plots and summary of the demo (scripts/demo.sh): reads runs/demo/ and writes PNG files there.

  demo_report.py OUT_DIR

Inputs: train/metrics.csv (mlip-trainer), test.log and validation_forces.csv (mlip-trainer test),
md.log, rdf_OO.dat and traj.dump (LAMMPS). Checks that liquid water came out: the first O-O peak
of g(r) at 2.7-2.9 A, no O-O pairs closer than 2.3 A, the mean temperature of the second half of
the run within 15 K of 300 K, and the molecules intact (each H nearest to an O that has exactly two
H) through the run. Exits 1 if a check fails, unless MLIP_DEMO_QUICK=1 (CI's shortened run, too
short for the physics).
"""
import csv
import os
import re
import sys

import matplotlib
import numpy as np

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_metrics(path):
    with open(path) as f:
        rows = list(csv.DictReader(f))
    return {key: [float(r[key]) for r in rows] for key in rows[0]} if rows else {}


def read_thermo(path):
    """Thermo rows of the last run in a LAMMPS log, as a dict of columns."""
    header, rows = None, []
    with open(path) as f:
        for line in f:
            words = line.split()
            if words[:1] == ["Step"]:
                header, rows = words, []
            elif header and words[:2] == ["Loop", "time"]:
                break
            elif header and len(words) == len(header):
                try:
                    rows.append([float(w) for w in words])
                except ValueError:
                    pass
    return {h: [r[i] for r in rows] for i, h in enumerate(header or [])}


def read_performance(path):
    text = open(path).read()
    loop = re.findall(r"Loop time of ([\d.eE+-]+) on (\d+) procs for (\d+) steps with (\d+) atoms", text)
    perf = re.findall(r"Performance: ([\d.eE+-]+) ns/day", text)
    seconds, procs, steps, atoms = (float(v) for v in loop[-1])
    return float(perf[-1]), 1e6 * seconds / (steps * atoms), int(procs), int(steps), int(atoms)


def read_rdf(path):
    """The last block of a fix ave/time vector file: (r, g, coordination) columns."""
    blocks, current = [], None
    with open(path) as f:
        for line in f:
            if line.startswith("#"):
                continue
            words = line.split()
            if len(words) == 2:
                current = []
                blocks.append(current)
            elif current is not None and len(words) >= 4:
                current.append([float(w) for w in words[:4]])
    last = blocks[-1]
    return [r[1] for r in last], [r[2] for r in last], [r[3] for r in last]


def read_dump(path):
    """Frames of a LAMMPS 'custom id type x y z' dump of an orthogonal box: (step, box lengths,
    types, positions) per frame."""
    frames = []
    with open(path) as f:
        lines = f.read().split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("ITEM: TIMESTEP"):
            step = int(lines[i + 1])
            n = int(lines[i + 3])
            bounds = np.array([[float(w) for w in lines[i + 5 + k].split()[:2]] for k in range(3)])
            data = np.array([[float(w) for w in line.split()] for line in lines[i + 9:i + 9 + n]])
            frames.append((step, bounds[:, 1] - bounds[:, 0], data[:, 1].astype(int), data[:, 2:5]))
            i += 9 + n
        else:
            i += 1
    return frames


def intact_fraction(box, types, pos, o_type=1, h_type=2):
    """Fraction of O atoms that own exactly two H, each H owned by its nearest O (minimum image)."""
    o, h = pos[types == o_type], pos[types == h_type]
    d = h[:, None, :] - o[None, :, :]
    d -= box * np.round(d / box)
    owner = np.argmin((d * d).sum(2), axis=1)
    counts = np.bincount(owner, minlength=len(o))
    return float(np.mean(counts == 2))


def read_test(path):
    text = open(path).read()
    energy = float(re.search(r"energy RMSE\s+([\d.]+) meV/atom", text).group(1))
    force = float(re.search(r"force RMSE\s+([\d.]+) meV/A", text).group(1))
    by_species = re.findall(r"force RMSE (\w+)\s+([\d.]+) meV/A", text)
    return energy, force, by_species


def main():
    out = sys.argv[1]
    quick = os.environ.get("MLIP_DEMO_QUICK", "0") == "1"
    m = read_metrics(os.path.join(out, "train", "metrics.csv"))
    e_rmse, f_rmse, f_species = read_test(os.path.join(out, "test.log"))
    thermo = read_thermo(os.path.join(out, "md.log"))
    ns_day, us_atom_step, procs, steps, atoms = read_performance(os.path.join(out, "md.log"))
    r, g, coord = read_rdf(os.path.join(out, "rdf_OO.dat"))
    traj = read_dump(os.path.join(out, "traj.dump"))
    intact = [(step, intact_fraction(box, types, pos)) for step, box, types, pos in traj]

    # Learning curve.
    fig, ax = plt.subplots(1, 2, figsize=(10, 4))
    ax[0].semilogy(m["epoch"], [1e3 * v for v in m["val_energy_rmse_eV_per_atom"]], "o-")
    ax[0].set(xlabel="epoch", ylabel="validation energy RMSE (meV/atom)", title="energy")
    ax[1].semilogy(m["epoch"], [1e3 * v for v in m["val_force_rmse_eV_per_A"]], "o-", color="C1")
    ax[1].set(xlabel="epoch", ylabel="validation force RMSE (meV/Å)", title="forces")
    fig.suptitle("mlip-trainer: se_e2_a on water-deepmd")
    fig.tight_layout()
    fig.savefig(os.path.join(out, "learning_curve.png"), dpi=120)
    plt.close(fig)

    # Force parity on the validation frames.
    ref, pred, elem, frames = [], [], [], set()
    with open(os.path.join(out, "validation_forces.csv")) as f:
        for row in csv.DictReader(f):
            frames.add(row["frame"])
            for d in "xyz":
                ref.append(float(row["f%s_ref" % d]))
                pred.append(float(row["f%s_pred" % d]))
                elem.append(row["element"])
    fig, ax = plt.subplots(figsize=(5, 5))
    for k, el in enumerate(sorted(set(elem))):
        xs = [a for a, e in zip(ref, elem) if e == el]
        ys = [b for b, e in zip(pred, elem) if e == el]
        ax.scatter(xs, ys, s=2, alpha=0.4, color="C%d" % k, label=el)
    lim = max(abs(v) for v in ref + pred)
    ax.plot([-lim, lim], [-lim, lim], "k--", lw=0.8)
    ax.set(xlabel="DFT force (eV/Å)", ylabel="mlip force (eV/Å)",
           title="validation forces: RMSE %.0f meV/Å" % f_rmse, xlim=(-lim, lim), ylim=(-lim, lim))
    ax.legend(markerscale=5)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "force_parity.png"), dpi=120)
    plt.close(fig)

    # O-O radial distribution function.
    window = [(ri, gi) for ri, gi in zip(r, g) if 2.3 <= ri <= 3.3]
    peak_r = max(window, key=lambda p: p[1])[0]
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(r, g)
    ax.axvspan(2.7, 2.9, color="0.85", label="liquid water's first peak, 2.7-2.9 Å")
    ax.axhline(1.0, color="0.5", lw=0.5)
    ax.set(xlabel="r (Å)", ylabel="g_OO(r)", title="O-O RDF, NVT 300 K: first peak at %.2f Å" % peak_r)
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "rdf_OO.png"), dpi=120)
    plt.close(fig)

    # Temperature and energy over time.
    t_ps = thermo["Time"]
    fig, ax = plt.subplots(2, 1, figsize=(7, 5), sharex=True)
    ax[0].plot(t_ps, thermo["Temp"])
    ax[0].axhline(300.0, color="0.5", lw=0.5)
    ax[0].set(ylabel="T (K)")
    ax[1].plot(t_ps, thermo["PotEng"], label="potential")
    ax[1].plot(t_ps, thermo["TotEng"], label="total")
    ax[1].set(xlabel="time (ps)", ylabel="energy (eV/atom)")
    ax[1].legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out, "md_thermo.png"), dpi=120)
    plt.close(fig)

    half = len(thermo["Temp"]) // 2
    t_mean = sum(thermo["Temp"][half:]) / max(1, len(thermo["Temp"][half:]))
    # O-O pairs closer than 2.3 A do not exist in liquid water (the hydrogen-bond O-O distance is
    # ~2.8 A): a model with a hole pulls molecules together there. Coordination within 2.3 A:
    close = max([c for ri, c in zip(r, coord) if ri <= 2.3] or [0.0])
    worst_step, worst = min(intact, key=lambda p: p[1])
    checks = [
        ("first O-O peak at 2.7-2.9 A", 2.7 <= peak_r <= 2.9, "%.2f A" % peak_r),
        ("no O-O pairs closer than 2.3 A", close < 0.01, "%.3f" % close),
        ("mean T (second half) within 15 K of 300 K", abs(t_mean - 300.0) <= 15.0, "%.1f K" % t_mean),
        # Liquid water at 300 K holds ~1e-7 ions per molecule: one H3O+/OH- pair among 128
        # molecules already means a model lets protons hop, so at most 1% of O may be off.
        ("H2O molecules intact (worst frame >= 99%)", worst >= 0.99, "%.1f%%" % (100 * worst)),
    ]
    print()
    print("==================== mlip demo summary ====================")
    print("validation (%d frames held out): energy RMSE %.2f meV/atom, force RMSE %.1f meV/A (%s)"
          % (len(frames), e_rmse, f_rmse,
             ", ".join("%s %s" % p for p in f_species)))
    print("training: %d epochs in %.1f min (best validation force RMSE %.1f meV/A)"
          % (len(m["epoch"]), m["elapsed_s"][-1] / 60, 1e3 * min(m["val_force_rmse_eV_per_A"])))
    print("MD: %d atoms, %d steps, %d MPI ranks: %.3f ns/day, %.1f us/atom-step"
          % (atoms, steps, procs, ns_day, us_atom_step))
    print("MD: temperature %.1f K (mean, second half), total energy %.4f -> %.4f eV/atom"
          % (t_mean, thermo["TotEng"][0], thermo["TotEng"][-1]))
    print("MD: intact H2O molecules %.1f%% at the end, %.1f%% at worst (step %d)"
          % (100 * intact[-1][1], 100 * worst, worst_step))
    for name, ok, value in checks:
        print("check: %-42s %-8s %s" % (name, value, "ok" if ok else "FAILED" + (" (quick run: not enforced)" if quick else "")))
    print("plots: " + ", ".join(os.path.join(out, p) for p in
                                ("learning_curve.png", "force_parity.png", "rdf_OO.png", "md_thermo.png")))
    # The same figures, one per line, for a kept run (scripts/demo.sh with MLIP_DEMO_KEEP=1)
    with open(os.path.join(out, "summary.tsv"), "w") as f:
        f.write("key\tvalue\n")
        for key, value in (("validation_frames", len(frames)), ("val_energy_rmse_mev_atom", "%.3f" % e_rmse),
                           ("val_force_rmse_mev_a", "%.2f" % f_rmse), ("epochs", len(m["epoch"])),
                           ("train_minutes", "%.2f" % (m["elapsed_s"][-1] / 60)), ("md_atoms", atoms),
                           ("md_steps", steps), ("md_ranks", procs), ("md_ns_day", "%.3f" % ns_day),
                           ("md_us_per_atom_step", "%.2f" % us_atom_step), ("md_mean_t_k", "%.1f" % t_mean),
                           ("oo_peak_a", "%.2f" % peak_r), ("intact_worst_percent", "%.1f" % (100 * worst)),
                           ("checks_passed", sum(ok for _, ok, _ in checks)), ("checks", len(checks))):
            f.write("%s\t%s\n" % (key, value))
    if not quick and not all(ok for _, ok, _ in checks):
        sys.exit(1)


if __name__ == "__main__":
    main()
