/* -*- c++ -*- ----------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.
   PairMLIP's LibTorch-side state (pair_mlip.cpp, pair_mlip_deviation.cpp); not a LAMMPS style
   header, so LibTorch stays out of force.cpp.
------------------------------------------------------------------------- */

#ifndef LMP_PAIR_MLIP_IMPL_H
#define LMP_PAIR_MLIP_IMPL_H

#include "error.h"
#include "pair_mlip.h"

#include "mlip/chunk_graph.h"
#include "mlip/error.h"
#include "mlip/graph_capture.h"
#include "mlip/model.h"

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

// LibTorch state, the graph (buffers reused from step to step) and the optional timers.
struct PairMLIP::Impl {
  std::unique_ptr<mlip::Model> model;
  mlip::ChunkGraph graph;
  int graph_member = 0;              // the committee member whose cutoff and species built `graph`
  std::vector<int> order;            // message-passing chunks: local atoms, chunk after chunk
  std::vector<int> chunk_end;        // end of each chunk in `order`

  // Model deviation (committee of 1 + members.size() models).
  std::vector<MlipMember> members;
  int out_freq = 0;                  // report every out_freq steps (0: no committee)
  std::string out_file;
  double relative = 0.0;             // > 0: force deviation relative to |F| + relative
  bool reporting = false;            // this compute() reports
  bigint last_report = -1;
  int nall = 0;                      // atoms (local + ghost) the buffers below are for
  std::vector<double> member_forces; // (models, nall, 3), LAMMPS units
  std::vector<double> member_virial; // (models, 9)
  std::vector<double> member_energy; // (models)
  std::vector<double> stats;         // pvector: the file's 7 columns after the step
  FILE *out = nullptr;               // rank 0

  // Message passing by per-layer ghost exchange (pair_mlip_exchange.cpp; 'exchange yes').
  enum class Asked { automatic, yes, no } exchange_asked = Asked::automatic;
  bool exchange = false;             // decided by init_exchange()
  int feature_width = 0;             // D: doubles per atom and exchange
  std::vector<double> features;      // (nall, D) the exchange's per-atom buffer
  enum class Reverse { deviation, features } reverse = Reverse::deviation;    // what reverse comm moves

  // 'cuda_graph yes': the model call recorded as a CUDA graph and replayed (mlip/graph_capture.h).
  bool cuda_graph_asked = false;
  std::unique_ptr<mlip::GraphCapture> capture;

  // Seconds spent per part since the start of the current run (timing yes).
  double t_graph = 0.0, t_model = 0.0, t_forces = 0.0;
  long calls = 0;
  bool in_setup = false;
  bigint run_first = -1, run_last = -1;    // the run the timers belong to

  ~Impl()
  {
    if (out) fclose(out);
  }
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
