"""Figures of docs/gpu.md: from the GPU checks' summary.txt and md.txt (bench_pair.sh's rows:
run, atoms, ranks, steps, total us/atom-step, LAMMPS outside the pair style, graph, model, forces,
peak RSS MiB, peak GPU MiB)."""
import re

import tables
from figures import figure, g
from figures.benchmarks import gpu_accuracy_line

H200 = "gpu-check/2026-11-26-f7968e4"
H200_MACE_CHUNKS = "gpu-check/2026-11-26-6454599"
MACE_CPU = "bench_mace/2026-11-26-e8cdcfa"


def md_row(run, name, atoms):
    """the cells of the md.txt row of run `name` at `atoms`, as numbers where they are"""
    for r in tables.gpu_md_rows(run.path):
        if r["run"] == name and r["atoms"] == str(atoms):
            return [float(c) if c.replace(".", "", 1).isdigit() else c for c in r["cells"]]
    raise LookupError(f"{run.name}/md.txt has no row '{name}' at {atoms} atoms")


def us(value):
    return f"{g(value)} us/atom-step"


def graph_saving(run):
    """how much of the se_e2_a float64 step at 10k atoms a CUDA graph saves"""
    plain, graph = md_row(run, "mlip se_e2_a f64 on cuda", 10368), md_row(run, "mlip se_e2_a f64 on cuda, CUDA graph", 10368)
    return f"{100 * (1 - graph[4] / plain[4]):.0f}%"


def host_share(run):
    """the host's graph building and force scatter in the se_e2_a float64 step at 98304 atoms"""
    r = md_row(run, "mlip se_e2_a f64 on cuda", 98304)
    return f"{100 * (r[6] + r[8]) / r[4]:.0f}% ({g(r[6], 3)} + {g(r[8], 3)} of {us(r[4])})"


figure("gpu-h200-graph-saving-10k", H200)(graph_saving)
figure("gpu-h200-host-share-100k", H200)(host_share)


@figure("gpu-h200-graph-replay-model-100k", H200)
def _(run):
    plain, graph = md_row(run, "mlip se_e2_a f64 on cuda", 98304), md_row(run, "mlip se_e2_a f64 on cuda, CUDA graph", 98304)
    return f"{g(graph[7], 2)} against {us(plain[7])}"


@figure("gpu-h200-mace-128-one-call", H200)
def _(run):
    return f"{md_row(run, 'mlip mace 128ch L2 f32 on cuda', 10368)[10]:.0f} MiB"


@figure("gpu-h200-mace-128-per-atom", H200_MACE_CHUNKS)
def _(run):
    r = md_row(run, "mlip mace 128ch L2 f32 on cuda, chunk 1024", 10368)
    return f"{r[10] / 1024:.0f} MiB"


@figure("gpu-h200-mace-128-chunk-1024", H200_MACE_CHUNKS)
def _(run):
    return f"{md_row(run, 'mlip mace 128ch L2 f32 on cuda, chunk 1024', 10368)[10]:.0f} MiB"


@figure("gpu-h200-mace-128-chunk-speed", H200_MACE_CHUNKS)
def _(run):
    chunked = md_row(run, "mlip mace 128ch L2 f32 on cuda, chunk 1024", 10368)[4]
    whole = md_row(run.__class__(H200), "mlip mace 128ch L2 f32 on cuda", 10368)[4]
    return f"{g(chunked, 2)} against {us(whole)}"


@figure("gpu-mace-128-cpu-1core", MACE_CPU)
def _(run):
    return us(run.med("memory", "us_per_atom_step", ranks=1))


H100 = "gpu-check/2026-11-27-fae0881"


def summary_line(run, prefix):
    """the rest of the first summary.txt line that starts with prefix"""
    return run.match("summary.txt", rf"^{prefix}(.*)$").strip()


def tests_passed(run):
    """the GPU tests of all the summary's "tests" lines"""
    lines = [l for l in run.text("summary.txt").splitlines() if l.startswith("tests ")]
    passed = sum(int(l.split(": ")[1].split()[0]) for l in lines)
    failed = sum(int(l.split(" passed, ")[1].split()[0]) for l in lines)
    return f"{passed} passed, {failed} failed"


def largest_in(run, prefix):
    """the largest relative difference on the summary line that starts with prefix"""
    largest = max(float(x) for x in re.findall(r"\d\.\d+e-\d+", summary_line(run, prefix)))
    return f"{largest:.1e}"


def md_medians(run, name, atoms):
    """the check's run `name` at `atoms`: its median us/atom-step and median cells (its timing windows)"""
    for _, run_name, run_atoms, value, cells in tables.gpu_md_medians(run.path):
        if run_name == name and str(run_atoms) == str(atoms) and value is not None:
            return value, cells
    raise LookupError(f"{run.name}/md.txt has no run '{name}' at {atoms} atoms")


def median_us(run, name, atoms):
    return md_medians(run, name, atoms)[0]


figure("gpu-h100-tests", H100)(tests_passed)


@figure("gpu-h100-forces-largest", H100)
def _(run):
    return largest_in(run, "forces GPU vs CPU")


figure("gpu-h100-host-share-100k", H100)(host_share)
figure("gpu-h100-graph-saving-10k", H100)(graph_saving)


@figure("gpu-h100-vs-h200-10k", H100)
def _(run):
    h200 = md_row(run.__class__(H200), "mlip se_e2_a f64 on cuda", 10368)[4]
    return f"{g(md_row(run, 'mlip se_e2_a f64 on cuda', 10368)[4])} against {us(h200)}"


HOST_CPU = "bench_pair/2026-12-01-0a5d4ce"


@figure("cpu-whole-step-host-share-of-target", HOST_CPU)
def _(run):
    """the host's parts of compressed se_e2_a float32's whole step at 100k atoms (on this project's
    CPU machine) against issue 54's 0.5 us/atom-step target for that model"""
    name = "mlip se_e2_a f32 compressed, device graph, CUDA graph eager"
    graph, forces = (run.med("md", field, potential=name) for field in ("graph", "forces"))
    return f"{g(graph + forces, 2)} us/atom-step, {100 * (graph + forces) / 0.5:.0f}%"


HOST_CPU_PAINN = "bench_pair/2026-12-03-a34070a"


@figure("cpu-painn-whole-step-host-share-of-target", HOST_CPU_PAINN)
def _(run):
    """the host's parts of issue 54's PaiNN (32 features, 3 layers, float32) whole step at 100k
    atoms (on this project's CPU machine) against issue 54's 3 us/atom-step target for it"""
    name = "mlip painn 32f 3L f32, device graph, CUDA graph eager"
    graph, forces = (run.med("md", field, potential=name) for field in ("graph", "forces"))
    return f"{g(graph + forces, 2)} us/atom-step, {100 * (graph + forces) / 3.0:.1f}%"


H200_DEC = "gpu-check/2026-12-04-33c9eba"

figure("gpu-1204-tests", H200_DEC)(tests_passed)


@figure("gpu-1204-forces-largest", H200_DEC)
def _(run):
    return largest_in(run, "forces GPU vs CPU")


@figure("gpu-1204-kernels-f64-largest", H200_DEC)
def _(run):
    line = summary_line(run, "operators' device kernels vs CPU kernels")
    largest = max(float(x) for x in re.findall(r"float64: (\d\.\d+e-\d+)", line))
    return f"{largest:.1e}"


@figure("gpu-1204-step-largest", H200_DEC)
def _(run):
    return largest_in(run, "whole step recorded vs unrecorded")


@figure("gpu-1204-vs-1126-10k", H200_DEC)
def _(run):
    before = md_row(run.__class__(H200), "mlip se_e2_a f64 on cuda", 10368)[4]
    return f"{g(median_us(run, 'mlip se_e2_a f64 on cuda, device graph', 10368), 2)} against {us(before)}"


def step_graph_against_eager(atoms):
    """compressed se_e2_a float64's whole step as one CUDA graph against its unrecorded step, both
    with the graph on the GPU, at `atoms`"""
    def value(run):
        name = "mlip se_e2_a f64 compressed on cuda, device graph"
        return f"{g(median_us(run, name + ', CUDA graph', atoms), 2)} against {us(median_us(run, name, atoms))}"
    return value


figure("gpu-1204-step-vs-eager-100k", H200_DEC)(step_graph_against_eager(98304))
figure("gpu-1204-step-vs-eager-10k", H200_DEC)(step_graph_against_eager(10368))


@figure("gpu-1204-1m-per-call", H200_DEC)
def _(run):
    m = re.search(r"md_1m: mlip_se_e2_a_f32_on_cuda__device_graph-1: 1 model calls .*?; (\d+) of (\d+) local atoms per call",
                  run.text("summary.txt"))
    return f"{m[1]} of {m[2]} atoms"


@figure("gpu-1204-eager-graph-forces-share-100k", H200_DEC)
def _(run):
    """the graph and forces parts of `timing yes` in compressed se_e2_a float64's unrecorded step
    with the graph on the GPU, 98304 atoms (medians of the run's windows)"""
    c = md_medians(run, "mlip se_e2_a f64 compressed on cuda, device graph", 98304)[1]
    return f"{100 * (c[6] + c[8]) / (c[6] + c[7] + c[8]):.0f}%"


@figure("gpu-1204-train-b1-step", "gpu-check/2026-12-04-33c9eba")
def _(run):
    rate = gpu_accuracy_line(run, 1, "2e-3")[0]
    return f"{g(1e3 / rate, 2)} ms on the H200 recorded ({g(rate, 3)} frames/s)"
