/* -*- c++ -*- ----------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.
   PairMLIP's LibTorch-side state and its parts, each a class that owns its state: the committee
   (pair_mlip_deviation.cpp), the ghost exchange (pair_mlip_exchange.cpp) and the timers
   (pair_mlip.cpp); not a LAMMPS style header, so LibTorch stays out of force.cpp.
------------------------------------------------------------------------- */

#ifndef LMP_PAIR_MLIP_IMPL_H
#define LMP_PAIR_MLIP_IMPL_H

#include "error.h"
#include "pair_mlip.h"
#include "pointers.h"

#include "pair_mlip_keywords.h"

#include "mlip/graph/chunk_graph.h"
#include "mlip/error.h"
#include "mlip/model/device_graph.h"
#include "mlip/model/device_step.h"
#include "mlip/model/device_memory.h"
#include "mlip/model/graph_capture.h"
#include "mlip/model/kernel_profile.h"
#include "mlip/model/model.h"

#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

namespace LAMMPS_NS {

// A job of PairMLIP that moves per-atom values between atoms and their ghosts with LAMMPS's
// communication (the ghost exchange, the committee). For it PairMLIP::forward_comm(job) or
// reverse_comm(job) runs one communication, and LAMMPS's pack/unpack callbacks on the pair style
// come here while it lasts. Buffers hold doubles. A job that only reverse-communicates (the
// committee) keeps the forward defaults: nothing to send.
class PairCommJob {
 public:
  // Forward: the owners' values list[0..n) into buf (returns the doubles written), then the
  // ghosts' [first, first + n) from it.
  virtual int pack_forward(int /*n*/, const int * /*list*/, double * /*buf*/) const { return 0; }
  virtual void unpack_forward(int /*n*/, int /*first*/, const double * /*buf*/) {}
  // Reverse: the ghosts' values [first, first + n) into buf, then added to their owners' list[0..n).
  virtual int pack_reverse(int n, int first, double *buf) const = 0;
  virtual void unpack_reverse(int n, const int *list, const double *buf) = 0;

 protected:
  // Jobs are members of PairMLIP::Impl, never owned through this interface (and a virtual
  // destructor here would clash with that of LAMMPS's Pointers, which may throw).
  ~PairCommJob() = default;
};

// One model's outputs on one chunk's graph, in LAMMPS's units, until they are added
// (PairMLIP::evaluate_chunk).
struct MlipGraphOutputs {
  mlip::ModelOutput out;
  mlip::EdgeForces forces;
  int64_t n_centers = 0;   // 0: the graph had no centres, nothing to add
};

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
class Committee : public PairCommJob {
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
  // Reverse communication of the models' forces on ghosts: reverse_width() values per atom.
  int reverse_width() const { return size() > 1 ? 3 * size() : 0; }
  int pack_reverse(int n, int first, double *buf) const override;
  void unpack_reverse(int n, const int *list, const double *buf) override;
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

// Message passing by per-layer ghost exchange (pair_mlip_exchange.cpp; 'exchange yes'): whether
// the model's features are exchanged, and the per-atom feature buffer that forward and reverse
// communication move between layers, alive for one communication.
class GhostExchange : public PairCommJob, protected Pointers {
 public:
  using Asked = mlip_pair::Options::Exchange;
  explicit GhostExchange(LAMMPS *lmp) : Pointers(lmp) {}
  // settings(): whether to exchange the features of `model` (loaded from `file`), as `asked` or by
  // default; an error (error->all) where 'exchange yes' cannot be had. `committee`: more than one
  // model; `kokkos_device`: mlip/kk on a device backend.
  void init(Asked asked, const mlip::Model &model, const std::string &file, bool committee, bool kokkos_device);
  bool on() const { return on_; }
  int width() const { return width_; }    // D: values per atom and exchange (0 when off)
  // The model on a graph whose centres are all local atoms and whose other nodes are ghosts
  // (node_atom, host: the atom of each node), layer by layer, the layers' features communicated
  // through `pair`; chunk_end: where each chunk of centres ends.
  mlip::ModelOutput evaluate(PairMLIP &pair, const mlip::Model &model, const mlip::GraphView &graph,
                             const int *node_atom, const std::vector<int64_t> &chunk_end);

  int pack_forward(int n, const int *list, double *buf) const override;
  void unpack_forward(int n, int first, const double *buf) override;
  int pack_reverse(int n, int first, double *buf) const override;
  void unpack_reverse(int n, const int *list, const double *buf) override;

 private:
  void check_available(int exchange_layers, int layers, const std::string &file, bool committee,
                       bool kokkos_device);
  // Rows of the graph's nodes [first, first + rows) into the buffer of nall atoms (zero elsewhere),
  // which takes the rows' dtype (the model's: float32 features are kept as float32).
  void to_atoms(const torch::Tensor &rows, const int *node_atom, int64_t first, int nall);
  // The buffer's rows of the graph's nodes [first, first + count), in its dtype; frees the buffer
  // (it holds every atom's features: no need to keep it through the layers' evaluation).
  torch::Tensor from_atoms(const int *node_atom, int64_t first, int64_t count);

  bool on_ = false;
  int width_ = 0;
  torch::Tensor features_;           // (nall, D), CPU, during one communication
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

// PairMLIP's LibTorch-side state: the model, the graph (buffers reused from step to step), and
// the three jobs above.
struct PairMLIP::Impl {
  explicit Impl(LAMMPS *lmp) : exchange(lmp) {}
  std::unique_ptr<mlip::Model> model;
  mlip::ChunkGraph graph;
  int graph_member = 0;              // the committee member whose cutoff and species built `graph`
  std::vector<int> order;            // message-passing chunks: local atoms, chunk after chunk
  std::vector<int> chunk_end;        // end of each chunk in `order`
  Committee committee;
  GhostExchange exchange;
  PairTimers timers;
  // 'cuda_graph yes': the model call recorded as a CUDA graph and replayed (mlip/model/graph_capture.h).
  std::unique_ptr<mlip::GraphCapture> capture;
  // On a GPU without 'chunk N': local atoms per call from the device's free memory and the bytes
  // the calls were seen to take (mlip/model/device_memory.h); null otherwise. A committee's steps
  // that report its deviation run all of its models in each call, and are sized apart from the
  // steps of the first model alone: `sizer` is this step's, sizers[1] on those steps, else sizers[0].
  std::array<std::unique_ptr<mlip::ChunkSizer>, 2> sizers;
  std::array<bool, 2> sizing_reported{};
  mlip::ChunkSizer *sizer = nullptr;
  std::array<long, 2> sized_calls{};  // model calls under each sizer (every 64th is measured)
  int gpu_sharing = 1;                // ranks of this node on this rank's GPU (they share its memory)
  // 'graph device': the graph built on the model's device (pair_mlip_device_graph.cpp).
  mlip::DeviceGraph device_graph;
  // 'graph device cuda_graph yes|eager': the whole step with static shapes (mlip/model/device_step.h).
  std::unique_ptr<mlip::DeviceStep> step;
  int64_t step_chunk = 0;   // its local atoms per model call: 'chunk N', else 0 (all, or the sizer's)
  std::vector<int64_t> atom_species;  // (local + ghost atoms) model species, -1 for NULL types
  std::vector<int> node_atom;         // device_graph's node_atom, on the host
  // 'timing kernels': LibTorch's profiler over a run's force calls after its first (rank 0), at
  // most kMaxProfiledCalls of them: the profiler keeps every event until it stops, so a whole long
  // run would fill the host's memory. `profile_reported_at`: the last step of the run whose table
  // is already in the log.
  static constexpr long kMaxProfiledCalls = 50;
  std::unique_ptr<mlip::KernelProfile> profile;
  long profiled_calls = 0;
  int64_t profile_reported_at = -1;

  // Whether this call's memory is measured: until one was, then every 64th (a query of the
  // driver and of LibTorch's allocator is not free on every step).
  bool measure_call() { return sizer && (!sizer->seen() || sized_calls[committee_sizing() ? 1 : 0]++ % 64 == 0); }
  void choose_sizer(bool all_models) { sizer = sizers[all_models && sizers[1] ? 1 : 0].get(); }
  bool committee_sizing() const { return sizer != nullptr && sizer == sizers[1].get(); }
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

// Every LibTorch or mlip failure surfaces through here, keeping its message and adding context;
// with `pass_out_of_memory`, a GPU out-of-memory error goes on to the caller (which splits the call).
template <typename F>
void guarded(Error *error, bool all_ranks, const std::string &what, F &&body, bool pass_out_of_memory = false)
{
  try {
    body();
  } catch (const mlip::Error &e) {
    // The TorchScript interpreter's errors come as mlip::Error (mlip/model/model.h), its out of
    // memory among them.
    if (pass_out_of_memory && mlip::is_out_of_memory(e)) throw;
    const std::string msg = "pair_style mlip: " + what + ": " + e.what();
    all_ranks ? error->all(FLERR, msg) : error->one(FLERR, msg);
  } catch (const c10::Error &e) {
    if (pass_out_of_memory && mlip::is_out_of_memory(e)) throw;
    const std::string msg = "pair_style mlip: " + what + ": " + e.what_without_backtrace();
    all_ranks ? error->all(FLERR, msg) : error->one(FLERR, msg);
  }
}

// Calls sized by the free memory (mlip::evaluate_within_memory): one atom a call that still runs
// out of GPU memory is this rank's error saying so; any other error as guarded() reports it.
template <typename F> void sized_calls(Error *error, const std::string &what, F &&body)
{
  const auto one_atom = [&](const std::string &why) {
    error->one(FLERR, "pair_style mlip: " + what + ": the GPU is out of memory even for calls of one atom: " + why);
  };
  guarded(error, false, what, [&] {
    try {
      body();
    } catch (const c10::Error &e) {
      if (!mlip::is_out_of_memory(e)) throw;
      one_atom(e.what_without_backtrace() + mlip::out_of_memory_note(e));
    } catch (const mlip::Error &e) {
      if (!mlip::is_out_of_memory(e)) throw;
      one_atom(e.what() + mlip::out_of_memory_note(e));
    }
  });
}

}    // namespace LAMMPS_NS

#endif
