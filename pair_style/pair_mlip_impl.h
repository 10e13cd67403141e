/* -*- c++ -*- ----------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.
   PairMLIP's LibTorch-side state and its parts: the committee (pair_mlip_deviation.cpp), the
   ghost exchange (pair_mlip_exchange.cpp) and the timers (pair_mlip.cpp); not a LAMMPS style
   header, so LibTorch stays out of force.cpp.
------------------------------------------------------------------------- */

#ifndef LMP_PAIR_MLIP_IMPL_H
#define LMP_PAIR_MLIP_IMPL_H

#include "error.h"
#include "pair_mlip.h"

#include "pair_mlip_keywords.h"

#include "mlip/graph/chunk_graph.h"
#include "mlip/error.h"
#include "mlip/model/graph_capture.h"
#include "mlip/model/model.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace LAMMPS_NS {

// A model of a committee beyond the first (pair_style mlip m0.pt m1.pt ...): evaluated only on
// the steps that report the model deviation.
struct MlipMember {
  std::string file;
  std::unique_ptr<mlip::Model> model;
  double cutoff = 0.0;             // A
  int layers = 0;                  // message-passing layers
  std::vector<int> type_species;   // (ntypes + 1) species index in this model, -1 = NULL
};

// The committee's other models and the deviation they report (pair_mlip_deviation.cpp): the
// sums of each model's forces, virial and energy on a reporting step, the statistics of the
// last report (compute pair's vector) and the file it goes to.
class Committee {
 public:
  static constexpr int n_columns = 7;    // after the step: virial max, min, mean; force max, min, mean; energy

  ~Committee() { close(); }
  // A new pair_style command: no members, the keywords' settings, a new file.
  void reset(const mlip_pair::Options &options);
  void add(MlipMember member) { members_.push_back(std::move(member)); }
  int size() const { return 1 + static_cast<int>(members_.size()); }    // with the driving model
  MlipMember &member(int k) { return members_[k - 1]; }                   // k = 1 .. size() - 1
  std::vector<MlipMember> &members() { return members_; }
  int out_freq() const { return out_freq_; }
  const std::string &out_file() const { return out_file_; }
  double relative() const { return relative_; }
  double *stats() { return stats_.data(); }

  // Whether this step reports (every out_freq steps, once); its sums start at zero if it does.
  bool begin_step(bigint step, int nall);
  bool reporting() const { return reporting_; }
  // One graph's energies (n_centers), node forces and virial of model k, LAMMPS units.
  void add_outputs(int k, const int *node_atom, int64_t n_centers, int64_t n_nodes, const double *energy,
                   const mlip::EdgeForces &forces);
  // Reverse communication of the models' forces on ghosts (3 x size() values per atom).
  int pack_reverse(int n, int first, double *buf) const;
  void unpack_reverse(int n, const int *list, const double *buf);
  // After the reverse communication: the force deviation of the first nlocal atoms.
  std::vector<double> atom_deviation(int nlocal) const;
  const std::vector<double> &virials() const { return virial_; }    // (size(), 9), this rank
  const std::vector<double> &energies() const { return energy_; }   // (size()), this rank
  // The step's report: compute pair's vector and (rank 0) the file's line. Throws mlip::Error
  // if the file cannot be written.
  void end_step(bigint step, const double *columns, bool rank0);

 private:
  void close();
  std::vector<MlipMember> members_;
  int out_freq_ = 0;                 // report every out_freq steps (0: no committee)
  std::string out_file_;
  double relative_ = 0.0;            // > 0: force deviation relative to |F| + relative
  bool reporting_ = false;           // this compute() reports
  bigint last_report_ = -1;
  int nall_ = 0;                     // atoms (local + ghost) the sums below are for
  std::vector<double> forces_;       // (models, nall, 3)
  std::vector<double> virial_;       // (models, 9)
  std::vector<double> energy_;       // (models)
  std::vector<double> stats_ = std::vector<double>(n_columns, 0.0);    // compute pair's vector
  FILE *out_ = nullptr;              // rank 0
};

// Message passing by per-layer ghost exchange (pair_mlip_exchange.cpp; 'exchange yes'): the
// per-atom feature buffer that forward and reverse communication move between layers.
class GhostExchange {
 public:
  using Asked = mlip_pair::Options::Exchange;
  Asked asked = Asked::automatic;
  bool on = false;                   // decided by PairMLIP::init_exchange()
  int width = 0;                     // D: values per atom and exchange (doubles in LAMMPS's buffers)
  bool reversing = false;            // a reverse communication of features is under way

  // Rows of the graph's nodes [first, first + rows) into the buffer of nall atoms (zero elsewhere),
  // which takes the rows' dtype (the model's: float32 features are kept as float32).
  void to_atoms(const torch::Tensor &rows, const int *node_atom, int64_t first, int nall);
  // The buffer's rows of the graph's nodes [first, first + count), in its dtype; frees the buffer
  // (it holds every atom's features: no need to keep it through the layers' evaluation).
  torch::Tensor from_atoms(const int *node_atom, int64_t first, int64_t count);
  int pack_forward(int n, const int *list, double *buf) const;
  void unpack_forward(int n, int first, const double *buf);
  int pack_reverse(int n, int first, double *buf) const;
  void add_reverse(int n, const int *list, const double *buf);

 private:
  torch::Tensor features_;           // (nall, D), CPU
};

// Seconds per part of compute() over the steps of the current run (always summed; reported with
// 'timing yes').
class PairTimers {
 public:
  enum Part { graph, model, forces };
  // First in every compute(): the timers start anew with each run, and with its setup call.
  void begin_compute(bool setup, bigint first_step, bigint last_step);
  void end_compute() { calls_++; }
  void add(Part part, double seconds) { seconds_[part] += seconds; }
  double seconds(Part part) const { return seconds_[part]; }
  long calls() const { return calls_; }

 private:
  double seconds_[3] = {0.0, 0.0, 0.0};
  long calls_ = 0;
  bool in_setup_ = false;
  bigint run_first_ = -1, run_last_ = -1;    // the run the timers belong to
};

// PairMLIP's LibTorch-side state: the model, the graph (buffers reused from step to step), the
// keywords, and the three jobs above.
struct PairMLIP::Impl {
  std::unique_ptr<mlip::Model> model;
  mlip_pair::Options options;
  mlip::ChunkGraph graph;
  int graph_member = 0;              // the committee member whose cutoff and species built `graph`
  std::vector<int> order;            // message-passing chunks: local atoms, chunk after chunk
  std::vector<int> chunk_end;        // end of each chunk in `order`
  Committee committee;
  GhostExchange exchange;
  PairTimers timers;
  // 'cuda_graph yes': the model call recorded as a CUDA graph and replayed (mlip/model/graph_capture.h).
  std::unique_ptr<mlip::GraphCapture> capture;
};

// Comm::forward_comm(Pair *) / reverse_comm(Pair *) since LAMMPS 2022; *_comm_pair before.
template <typename C> auto forward_comm_of(C *comm, Pair *pair, int) -> decltype(comm->forward_comm(pair), void())
{
  comm->forward_comm(pair);
}
template <typename C> void forward_comm_of(C *comm, Pair *pair, long)
{
  comm->forward_comm_pair(pair);
}
template <typename C> auto reverse_comm_of(C *comm, Pair *pair, int) -> decltype(comm->reverse_comm(pair), void())
{
  comm->reverse_comm(pair);
}
template <typename C> void reverse_comm_of(C *comm, Pair *pair, long)
{
  comm->reverse_comm_pair(pair);
}

// Every LibTorch or mlip failure surfaces through here, keeping its message and adding context.
template <typename F> void guarded(Error *error, bool all_ranks, const std::string &what, F &&body)
{
  try {
    body();
  } catch (const mlip::Error &e) {
    const std::string msg = "pair_style mlip: " + what + ": " + e.what();
    all_ranks ? error->all(FLERR, msg) : error->one(FLERR, msg);
  } catch (const c10::Error &e) {
    const std::string msg = "pair_style mlip: " + what + ": " + e.what_without_backtrace();
    all_ranks ? error->all(FLERR, msg) : error->one(FLERR, msg);
  }
}

}    // namespace LAMMPS_NS

#endif
