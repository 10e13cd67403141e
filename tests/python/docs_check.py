"""ctest docs_check: benchmarks/tables.py's figure check catches what it must (a figure typed by
hand in prose or in a hand-typed table, a figure that differs from its run, a run from a dirty
tree, an uncited run) and lets through what it must (generated figures, quoted facts, settings,
code, versions)."""
import pathlib
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
import figures  # noqa: E402
import tables  # noqa: E402

failures = []


def expect(what, got, want):
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")


def hand_typed(text):
    with tempfile.TemporaryDirectory() as d:
        path = pathlib.Path(d) / "doc.md"
        path.write_text(text)
        return sorted(h for _, h in tables.unmarked(path))


# prose: a number with a unit of measurement, also across a line break
expect("prose", hand_typed("It runs 6.2x faster, in 3.4 s and 120\nMiB.\n"), sorted(["6.2x", "3.4 s", "120 MiB"]))
expect("rates and errors", hand_typed("at 39.4 frames/s, 2.6 us/atom-step, 68 meV/Å, 5%\n"),
       sorted(["39.4 frames/s", "2.6 us/atom-step", "68 meV/Å", "5%"]))
# a hand-typed table of measurements; a reference table of defaults; a version
expect("table", hand_typed("| run | frames/s |\n|---|---|\n| memory | 40.2 |\n"), ["40.2"])
expect("reference table", hand_typed("| key | default |\n|---|---|\n| `lr` | 0.001 |\n"), [])
expect("version", hand_typed("| LAMMPS | Kokkos 3.4 |\n"), [])
# what is not a figure typed by hand
expect("marked", hand_typed("<!--fig x-->3.4x<!--/fig--> and <!--fig y-->2 s<!--/fig-->, "
                            "<!--quote https://example.org-->2.6 us/atom-step<!--/quote-->, trains for "
                            "<!--set-->11 minutes<!--/set-->\n"), [])
expect("code", hand_typed("`timeout 600 s`\n\n    sleep 5 s\n\n```\n3.4x\n```\n"), [])
expect("no unit", hand_typed("3 repeats of 10368 atoms, 240x3 nets, 0.75 x the distance\n"), [])

# runs: clean, dirty, unrecorded
with tempfile.TemporaryDirectory() as d:
    tables.RESULTS = pathlib.Path(d)
    for name, commit in (("b/clean", "0123456789abcdef subject\n"), ("b/dirty", "0123456789abcdef subject\n M src.cpp\n"),
                         ("b/none", None)):
        (tables.RESULTS / name).mkdir(parents=True)
        if commit:
            (tables.RESULTS / name / "commit.txt").write_text(commit)
    expect("clean run", tables.run_problem("b/clean"), None)
    expect("dirty run", "uncommitted" in (tables.run_problem("b/dirty") or ""), True)
    expect("unrecorded run", "no commit.txt" in (tables.run_problem("b/none") or ""), True)
    expect("missing run", tables.run_problem("b/gone"), "no such folder")

    # a figure is made from its run; the doc's text must be what it makes
    (tables.RESULTS / "b/clean/rows.tsv").write_text("case\tus\nx\t3\nx\t5\nx\t4\n")
    figures.FIGURES["selftest"] = ("b/clean", lambda run: f"{run.med('rows', 'us', case='x'):g} us")
    errors = []
    expect("figure made", tables.fresh_figures("<!--fig selftest-->9 us<!--/fig-->", "doc", errors),
           "<!--fig selftest-->4 us<!--/fig-->")
    tables.fresh_figures("<!--fig nosuch-->1<!--/fig-->", "doc", errors)
    expect("unknown figure", len(errors), 1)

# compare_stacks' table: each build's ratio to the first, and the range of its ratios round by
# round (paired by round; a failed round, written "failed", is left out, not an error)
with tempfile.TemporaryDirectory() as d:
    run = pathlib.Path(d)
    (run / "rows.tsv").write_text("build\tround\tstage\trun\tvalue\tunit\n"
                                  "old\t1\tpair\tx\t10\tus\nnew\t1\tpair\tx\t12\tus\n"
                                  "new\t2\tpair\tx\t9\tus\nold\t2\tpair\tx\t10\tus\n"
                                  "old\t3\tpair\tx\tfailed\tus\nnew\t3\tpair\tx\t30\tus\n")
    row = [line for line in tables.compare_builds(run).splitlines() if line.startswith("| pair")]
    expect("compare table", row, ["| pair | x | us | 10 (10-10), 1 failed | 12 (9-30) **1.20x** (rounds 0.90-1.20) |"])

if failures:
    print("docs_check:\n  " + "\n  ".join(failures))
    sys.exit(1)
print("docs_check: every case as expected")
