/* -*- c++ -*- ----------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.
   pair_style mlip MODEL [MODEL2 ...] [keywords] (the keywords: pair_mlip_keywords.cpp)
------------------------------------------------------------------------- */

#ifdef PAIR_CLASS
// clang-format off
PairStyle(mlip,PairMLIP);
// clang-format on
#else

#ifndef LMP_PAIR_MLIP_H
#define LMP_PAIR_MLIP_H

#include "pair.h"

#include "pair_mlip_keywords.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mlip {
class Model;
class DeviceGraphBuilder;
struct EdgeForces;
struct GraphView;
struct ModelOutput;
struct StepOutput;
}

namespace LAMMPS_NS {

class PairCommJob;
struct MlipGraphOutputs;

// Evaluates a frozen mlip model (TorchScript) on LAMMPS atoms. LibTorch stays out of this
// header (LAMMPS includes every pair header into force.cpp): its state lives in Impl.
class PairMLIP : public Pair {
 public:
  PairMLIP(class LAMMPS *);
  ~PairMLIP() override;

  void compute(int, int) override;
  void settings(int, char **) override;
  void coeff(int, char **) override;
  void init_style() override;
  double init_one(int, int) override;
  // LAMMPS's communication callbacks, passed to the job that is communicating (below).
  int pack_forward_comm(int, int *, double *, int, int *) override;
  void unpack_forward_comm(int, int, double *) override;
  int pack_reverse_comm(int, int, double *) override;
  void unpack_reverse_comm(int, int *, double *) override;

  // One LAMMPS communication of a job's per-atom values (pair_mlip_impl.h: the ghost exchange's
  // features, the committee's forces): the callbacks above go to `job`, and only during the call.
  void forward_comm(PairCommJob &job);
  void reverse_comm(PairCommJob &job);

 protected:
  struct Impl;
  std::unique_ptr<Impl> impl;
  PairCommJob *communicating = nullptr;    // the job of the communication under way, if any
  PairCommJob &communicating_job();         // that job (an error if there is none)

  // The keywords of the pair_style command, read where they are used; settings() replaces a
  // chunk not given (0) by the default for the model.
  mlip_pair::Options options;
  std::string model_file;
  int layers;                    // message-passing layers of the model (> 1: graph over ghosts)
  double cutoff;                 // model cutoff (A), from the model's metadata
  double list_cutoff;            // largest cutoff of the committee's models (A)
  double message_reach;          // largest layers x cutoff of its message-passing models (A), else 0
  // LAMMPS's units: 1 A in its distance unit and 1 eV in its energy unit (1 and 1 for metal).
  double distance_unit, energy_unit;
  std::vector<int> type_species; // (ntypes + 1) model species index per LAMMPS type, -1 = NULL

  void allocate();
  // The parts of settings(): the model files (and `options`); the models loaded (returns a note
  // on the device for the log); the default chunk; the neighbour list's and ghosts' reach; the log.
  std::vector<std::string> parse_settings(int narg, char **arg);
  std::string load_models(const std::vector<std::string> &files);
  int default_chunk(bool one_call) const;
  void init_sizer(bool wanted);
  int64_t available_memory() const;
  void report_sizing(int64_t limit_before, int64_t centres, int64_t per_call = 0);
  void set_reach();
  void log_settings(const std::string &device_note, bool one_call, bool chunk_given, bool malloc_tuned);
  std::vector<int> map_types(const mlip::Model &model, const std::string &file, char **elements);
  // member: 0 = the model that drives the dynamics, k > 0 = the committee's k-th other model.
  void evaluate_centres(const int *atoms, int first, int last);
  void evaluate_compact_chunks();
  void evaluate_chunk(const int *first, const int *last);
  void evaluate_committee(const int *first, const int *last);
  void build_graph(const int *first, const int *last, int member, bool one_hop = false);
  MlipGraphOutputs evaluate_graph(int member);
  void add_graph_outputs(int member, const MlipGraphOutputs &outputs, const std::vector<int> &node_atom);
  void add_outputs(const double *energy, const mlip::EdgeForces &forces, const int *node_atom, int64_t n_centers);
  // Atoms closer than this (A) mean a broken simulation: an error naming both (with their IDs).
  static constexpr double min_distance = 0.1;
  void check_distances();
  void close_atoms_error(int i, int j, double r);    // local or ghost indices
  void warn_about_masses();
  void set_units();
  // Model outputs (eV, eV/A) to LAMMPS's units, in place.
  void to_lammps_units(mlip::ModelOutput &out, mlip::EdgeForces &forces) const;

  // Model deviation of a committee (pair_mlip_deviation.cpp).
  void load_committee(const std::vector<std::string> &files, const std::string &device);
  int committee_size() const;
  bool same_graph(int a, int b) const;
  // A committee member as graph builders need it (0: the model that drives the dynamics).
  struct Member {
    mlip::Model *model;
    double cutoff;                          // A
    int layers;                             // message-passing layers
    const std::vector<int> *type_species;   // (ntypes + 1) species index, -1 = NULL
  };
  Member member(int m) const;
  bool deviation_step() const;    // this compute() reports the committee's deviation
  void init_deviation();
  void begin_deviation();
  void add_to_deviation(int member, const int *node_atom, int64_t n_centers, int64_t n_nodes, const double *energy,
                        const mlip::EdgeForces &forces);
  void end_deviation();

  void init_cuda_graph(bool one_call);
  // Message passing by per-layer ghost exchange (pair_mlip_exchange.cpp): a one-cutoff ghost
  // shell, features forward-communicated between layers, their gradients reverse-communicated.
  void compute_exchanging();
  void compute_device_graph();
  void init_device_graph();
  void evaluate_device_chunk(const mlip::DeviceGraphBuilder &cells, int64_t first, int64_t last);
  mlip::StepOutput evaluate_step(int n, bool atom_virial);
  void compute_device_step();
  void check_device_distances();
  void check_device_graph_settings();
  bool exchanging() const;
  // The model on a graph of all local atoms (the centres) and ghosts; node_atom (host): the
  // atom of each node; chunk_end: where each chunk of centres ends (empty: options.chunk each).
  // Shared with mlip/kk.
  mlip::ModelOutput evaluate_exchanging(const mlip::GraphView &graph, const int *node_atom,
                                        std::vector<int64_t> chunk_end = {});

  // Shared with mlip/kk (pair_mlip_kokkos.h), which builds its graph from Kokkos views.
  mlip::Model &model();
  // Where settings() loads the model: `asked` is the device keyword's value ("" if none given);
  // `note` gets a line for the log.
  virtual std::string model_device(const std::string &asked, std::string &note);
  void begin_compute(int eflag, int vflag, bool alloc = true);    // ev_init, timers
  void end_compute();                           // timing report at the end of a run
  enum Timer { GRAPH, MODEL, FORCES };
  void add_time(Timer which, double seconds);
  void report_timing();
  void start_profile();                         // timing kernels
  void report_profile();
};

}    // namespace LAMMPS_NS

#endif
#endif
