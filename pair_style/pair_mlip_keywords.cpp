/* ----------------------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.
   The keyword table of pair_style mlip (pair_mlip_keywords.h).
------------------------------------------------------------------------- */

#include "pair_mlip_keywords.h"

#include "mlip/error.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

namespace mlip_pair {

namespace {

[[noreturn]] void bad_value(const std::string &key, const std::string &value, const std::string &expected)
{
  throw mlip::Error("keyword '" + key + "' must be " + expected + ", not '" + value + "'");
}

int positive_int(const std::string &key, const std::string &value)
{
  char *end = nullptr;
  errno = 0;
  const long v = std::strtol(value.c_str(), &end, 10);
  if (value.empty() || *end != '\0' || errno == ERANGE || v < 1 || v > 2147483647L)
    bad_value(key, value, "a whole number >= 1");
  return static_cast<int>(v);
}

double positive_double(const std::string &key, const std::string &value)
{
  char *end = nullptr;
  errno = 0;
  const double v = std::strtod(value.c_str(), &end);
  if (value.empty() || *end != '\0' || errno == ERANGE || !std::isfinite(v) || !(v > 0.0))
    bad_value(key, value, "a finite number > 0");
  return v;
}

bool yes_no(const std::string &key, const std::string &value)
{
  if (value == "yes") return true;
  if (value == "no") return false;
  bad_value(key, value, "'yes' or 'no'");
}

}    // namespace

const std::vector<Keyword> &keywords()
{
  static const std::vector<Keyword> table = {
      {"chunk", "N",
       "64 (local models), 1024 (compressed se_e2_a), 128 (message passing, ghost exchange or halo); on a GPU sized "
       "by the free memory ([gpu.md](gpu.md)), with `cuda_graph yes` too (recorded at the calls' size, and again "
       "smaller when a recording runs out of memory; with `graph device cuda_graph yes`: all in the first "
       "recording, then sized by the free memory from what it took), all local atoms with the ghost exchange; "
       "with `graph device` on the CPU, all local atoms",
       "most local atoms per model call: bounds the memory of a call", false,
       [](const std::string &v, Options &o) { o.chunk = positive_int("chunk", v); }},
      {"head", "NAME", "the file's (`head`)",
       "the head of a multi-head model (MACE: `heads`) the run uses, e.g. one head of MACE-MH", false,
       [](const std::string &v, Options &o) { o.head = v; }},
      {"timing", "yes|no|kernels", "no",
       "after each run, where the pair time went (graph, model, forces; µs/atom-step) and the peak memory (on a "
       "GPU each part's queued work is waited for before its time is taken, so that a part's kernels count in that "
       "part: with `graph device`, this adds a wait or two a call; with `graph device cuda_graph`, graph is the host's own "
       "part of the step and model the rest, [gpu.md](gpu.md)); "
       "`kernels` also profiles the run's force calls after its first, at most 50 (LibTorch's profiler, rank 0; it "
       "keeps every event until it stops): the GPU's kernels and "
       "copies, the host's launches, waits and operators, per force call ([gpu.md](gpu.md))",
       false,
       [](const std::string &v, Options &o) {
         if (v != "yes" && v != "no" && v != "kernels") bad_value("timing", v, "'yes', 'no' or 'kernels'");
         o.timing_kernels = v == "kernels";
         o.timing = v != "no";
       }},
      {"device", "cpu|cuda|cuda:N|auto", "cpu",
       "where the model runs: `cuda` the rank's GPU (node-local rank modulo the visible GPUs), `cuda:N` GPU N, "
       "`auto` a GPU when one is visible; not for `mlip/kk`, whose model runs where Kokkos runs",
       false, [](const std::string &v, Options &o) { o.device = v; }},
      {"cuda_graph", "yes|no|eager", "no",
       "with `device cuda`: record the model call (forward and forces) as a CUDA graph and replay it each step, on a "
       "graph grouped and padded to static sizes (+10%, multiples of 32; recorded anew when outgrown); with "
       "`graph device` the whole step (cell list, edges, model, forces) as one. se_e2_a models (plain or compressed), "
       "and message-passing models (PaiNN, MACE) with a halo (`exchange no`; with `graph device` their whole step, "
       "each chunk's halo found on the device); "
       "not with the ghost exchange or `mlip/kk`. Several calls a step (`chunk`, or calls sized by the free memory) "
       "replay one recording, padded to the largest; with `graph device` the recorded step makes its model calls in "
       "chunks. `eager`: the same padded path run without "
       "recording, on any device (to tell a recording's fault from the model's)",
       false,
       [](const std::string &v, Options &o) {
         if (v != "yes" && v != "no" && v != "eager") bad_value("cuda_graph", v, "'yes', 'no' or 'eager'");
         o.cuda_graph = v != "no";
         o.cuda_graph_eager = v == "eager";
       }},
      {"graph", "host|device", "host",
       "where the neighbour graph is built each step: `device` copies the positions to the model's device once and "
       "builds the cell list, the halo and the edge list there, and the forces and virials too (one copy back); calls "
       "sized by the free memory, or of at most `chunk` atoms, or with `cuda_graph` the whole step recorded as one "
       "CUDA graph; not with the ghost exchange, several models or `mlip/kk`",
       false,
       [](const std::string &v, Options &o) {
         if (v != "host" && v != "device") bad_value("graph", v, "'host' or 'device'");
         o.device_graph = v == "device";
       }},
      {"deterministic", "yes|no", "no",
       "on a GPU, sums in a fixed order: the forces' and virials' sums onto the atoms (`index_add`) go through a sort "
       "instead of atomics and cuBLAS gets a fixed workspace, so that a run repeated on the same GPU and build repeats "
       "bitwise (slower where atomics were: [gpu.md](gpu.md)); LibTorch's switch for the whole process. On the CPU "
       "runs repeat bitwise either way",
       false, [](const std::string &v, Options &o) { o.deterministic = yes_no("deterministic", v); }},
      {"exchange", "yes|no", "yes for models that define their layers (PaiNN and MACE written by this version), else no",
       "message-passing models: exchange the ghosts' features between layers instead of a halo of layers x cutoff",
       false,
       [](const std::string &v, Options &o) {
         o.exchange = yes_no("exchange", v) ? Options::Exchange::yes : Options::Exchange::no;
       }},
      {"out_freq", "N", "100", "with several models: report their deviation every N steps", true,
       [](const std::string &v, Options &o) { o.out_freq = positive_int("out_freq", v); }},
      {"out_file", "FILE", "`model_devi.out`",
       "with several models: where the deviation goes (rank 0 writes; a new `pair_style` command starts the file "
       "anew)",
       true, [](const std::string &v, Options &o) { o.out_file = v; }},
      {"relative", "EPS", "off",
       "with several models: the force deviation of each atom divided by (its mean force's norm + EPS)", true,
       [](const std::string &v, Options &o) { o.relative = positive_double("relative", v); }},
  };
  return table;
}

bool is_keyword(const std::string &word)
{
  for (const Keyword &k : keywords())
    if (word == k.name) return true;
  return false;
}

std::string keyword_names()
{
  std::string out;
  for (const Keyword &k : keywords()) out += (out.empty() ? "" : ", ") + std::string(k.name);
  return out;
}

std::string synopsis()
{
  std::string out = "pair_style mlip MODEL [MODEL2 ...]";
  for (const Keyword &k : keywords()) out += " [" + std::string(k.name) + " " + k.value + "]";
  return out;
}

Options parse_keywords(int narg, char **arg, std::size_t n_models)
{
  Options options;
  if (n_models > 1) options.out_freq = 100;
  std::string committee_keyword;
  for (int iarg = 0; iarg < narg; iarg += 2) {
    const std::string key = arg[iarg];
    const Keyword *keyword = nullptr;
    for (const Keyword &k : keywords())
      if (key == k.name) keyword = &k;
    if (!keyword) throw mlip::Error("unknown keyword '" + key + "' (known: " + keyword_names() + ")");
    if (iarg + 1 >= narg) throw mlip::Error("keyword '" + key + "' needs a value (" + keyword->value + ")");
    keyword->parse(arg[iarg + 1], options);
    if (keyword->committee_only) committee_keyword = key;
  }
  if (!committee_keyword.empty() && n_models < 2)
    throw mlip::Error("'" + committee_keyword +
                      "' reports the deviation of a committee: give two or more model files (out_freq, out_file and "
                      "relative are for committees)");
  return options;
}

std::string markdown_table()
{
  std::string out = "| keyword | default | meaning |\n|---|---|---|\n";
  for (const Keyword &k : keywords()) {
    std::string value = k.value;
    std::string escaped;
    for (char c : value) escaped += c == '|' ? std::string("\\|") : std::string(1, c);
    out += "| `" + std::string(k.name) + " " + escaped + "` | " + k.default_value + " | " + k.help + " |\n";
  }
  return out;
}

}    // namespace mlip_pair
