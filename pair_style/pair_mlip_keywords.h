/* -*- c++ -*- ----------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.
   The keywords of pair_style mlip, in one table: the parser, the usage message, the error
   lists, the synopsis in the headers and docs/pair_style.md's table all come from it (a test
   fails when the docs drift). No LAMMPS or LibTorch header: tested on its own.
------------------------------------------------------------------------- */

#ifndef LMP_PAIR_MLIP_KEYWORDS_H
#define LMP_PAIR_MLIP_KEYWORDS_H

#include <cstddef>
#include <string>
#include <vector>

namespace mlip_pair {

// What the keywords after the model files ask for (a new pair_style command starts anew).
struct Options {
  enum class Exchange { automatic, yes, no };
  int chunk = 0;                          // 0: not given (PairMLIP::settings() sets the default for the model)
  bool timing = false;
  bool timing_kernels = false;            // timing kernels: LibTorch's profiler over the run's steps
  std::string device;                     // "" if not given
  bool cuda_graph = false;
  bool cuda_graph_eager = false;          // cuda_graph eager: the recorded path run without recording
  bool device_graph = false;              // graph device: built where the model runs
  bool deterministic = false;             // deterministic yes: LibTorch's deterministic GPU kernels
  Exchange exchange = Exchange::automatic;
  int out_freq = 0;                       // committees: 100 unless given
  std::string out_file = "model_devi.out";
  double relative = 0.0;                  // > 0: force deviation relative to |F| + relative
  std::string head;                       // a multi-head model's head; "" the file's own
};

// One keyword: its name, its value's form, its default and its meaning (one line each), and the
// parser of its value (throws mlip::Error naming the keyword and the value).
struct Keyword {
  const char *name;
  const char *value;
  const char *default_value;
  const char *help;
  bool committee_only;                    // reports a committee's deviation: needs 2+ models
  void (*parse)(const std::string &value, Options &options);
};

const std::vector<Keyword> &keywords();
bool is_keyword(const std::string &word);
// "chunk, timing, device, ..."
std::string keyword_names();
// "pair_style mlip MODEL [MODEL2 ...] [chunk N] [timing yes|no] ..."
std::string synopsis();
// The keywords after the model files (narg words); n_models sets the committee defaults.
// Throws mlip::Error with a message that names the keyword.
Options parse_keywords(int narg, char **arg, std::size_t n_models);
// docs/pair_style.md's keyword table (markdown), made from keywords().
std::string markdown_table();

}    // namespace mlip_pair

#endif
