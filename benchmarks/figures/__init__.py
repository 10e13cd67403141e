"""The figures that README.md and docs/*.md quote in prose, each made from one kept run; one
module here per doc (readme.py for README.md, benchmarks.py for docs/benchmarks.md, ...).

    <!--fig NAME-->TEXT<!--/fig-->        in a doc; TEXT is what make(NAME) returns

A figure is registered with the run it comes from and a function of that run:

    @figure("ft-base-test-force", "fine_tuning/2026-11-26-f78c933")
    def _(run):
        return f"{g(run.med('rows', 'test_f_mev_a', run=BASE))} meV/Å"   # rows.tsv, column, row filter

benchmarks/tables.py --write puts TEXT into the docs, and --check fails where it differs, where
a figure is used in no doc, or where its run is dirty. Medians over a run's repeats, as in the
tables.
"""
import pathlib
import re
import statistics

import tables

FIGURES = {}


class Run:
    """one kept run: its TSV rows, selected by field values, and its other files"""

    def __init__(self, name):
        self.name = name
        self.path = tables.RESULTS / name

    def rows(self, table, **where):
        rows = tables.read_tsv(self.path / f"{table}.tsv")
        chosen = [r for r in rows if all(r.get(k) == str(v) for k, v in where.items())]
        if not chosen:
            raise SystemExit(f"figures.py: {self.name}/{table}.tsv has no row with {where}")
        return chosen

    def values(self, table, field, **where):
        return [float(r[field]) for r in self.rows(table, **where)]

    def med(self, table, field, **where):
        return statistics.median(self.values(table, field, **where))

    def text(self, file):
        return (self.path / file).read_text()

    def match(self, file, pattern):
        """the first group of the first match of pattern in one of the run's files"""
        m = re.search(pattern, self.text(file), re.M)
        if not m:
            raise SystemExit(f"figures.py: no '{pattern}' in {self.name}/{file}")
        return m[1]


def figure(name, run):
    def register(fn):
        if name in FIGURES:
            raise SystemExit(f"figures.py: figure '{name}' registered twice")
        FIGURES[name] = (run, fn)
        return fn
    return register


def make(name):
    if not FIGURES:
        load()
    run, fn = FIGURES[name]
    return fn(Run(run))


def load():
    """every module of this folder, each registering its doc's figures"""
    import importlib
    for path in sorted(pathlib.Path(__file__).parent.glob("*.py")):
        if path.stem != "__init__":
            importlib.import_module(f"figures.{path.stem}")


def g(x, digits=3):
    """x to `digits` significant figures, never in exponent form below a million"""
    text = f"{x:.{digits}g}"
    return f"{x:.0f}" if "e+" in text and abs(x) < 1e6 else text


def ratio(a, b, digits=2):
    return f"{g(a / b, digits)}x"


def percent(a, b, digits=2):
    """how far a is below b, in % of b"""
    return f"{g(100 * (b - a) / b, digits)}%"
