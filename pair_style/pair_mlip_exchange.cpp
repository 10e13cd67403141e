/* ----------------------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.

   Message passing by per-layer ghost exchange ('pair_style mlip model.pt exchange yes'): the
   ghost shell is one cutoff (+ skin) wide whatever the number of layers. Every local atom is a
   centre of one graph whose other nodes are the ghosts within the cutoff; each layer updates the
   local atoms only, and the ghosts' features are refreshed from their owners by forward
   communication before the next layer. In the backward pass the ghosts' feature gradients go
   back to their owners by reverse communication, layer by layer (mlip::evaluate_exchanging,
   common/src/message_passing.cpp). Forces and virials follow from the edge gradients as for any
   model. For models that define their layers (mp_* methods; PaiNN written by this version).
   With more local atoms than 'chunk N', each layer takes them N at a time and the backward pass
   evaluates each chunk's layer again, so that memory is bounded by the chunk.
   Not yet: committees and mlip/kk, which keep the halo path.
------------------------------------------------------------------------- */

#include "pair_mlip.h"
#include "pair_mlip_impl.h"

#include "atom.h"
#include "comm.h"
#include "neigh_list.h"

#include "mlip/message_passing.h"

#include <algorithm>
#include <chrono>

using namespace LAMMPS_NS;

/* ----------------------------------------------------------------------
   init_exchange: whether 'exchange yes' can be honoured for this model (settings())
------------------------------------------------------------------------- */

void PairMLIP::init_exchange()
{
  Impl &s = *impl;
  if (!s.exchange) return;
  if (committee_size() > 1)
    error->all(FLERR, "pair_style mlip: 'exchange yes' is not available for a committee yet (the deviation's "
                      "models take the halo path): use 'exchange no'");
  if (kokkosable) error->all(FLERR, "pair_style mlip/kk: 'exchange yes' is not available in mlip/kk yet");
  const int n = mlip::exchange_layers(*s.model);
  if (n < 2)
    error->all(FLERR, fmt::format("pair_style mlip: 'exchange yes' needs a message-passing model that defines its "
                                  "layers (mp_* methods, written by this mlip); '{}' {}",
                                  model_file, layers > 1 ? "is from an older mlip: export it again" : "is local"));
  guarded(error, true, "exchange", [&] { s.feature_width = static_cast<int>(mlip::exchange_feature_width(*s.model)); });
  comm_forward = s.feature_width;
  comm_reverse = std::max(comm_reverse, s.feature_width);
  if (comm->me == 0)
    utils::logmesg(lmp, "pair_style mlip: {} layers with ghost exchange: ghost shell of one cutoff, {} values per "
                        "atom forward-communicated after each layer but the last and reverse-communicated in the "
                        "backward pass\n", n, s.feature_width);
}

/* ----------------------------------------------------------------------
   compute_exchanging: one graph of all local atoms, evaluated layer by layer
------------------------------------------------------------------------- */

void PairMLIP::compute_exchanging()
{
  Impl &s = *impl;
  const int nall = atom->nlocal + atom->nghost;
  const int width = s.feature_width;
  build_graph(list->ilist, list->ilist + list->inum, 0, /*one_hop=*/true);    // ghosts within the cutoff
  const mlip::ChunkGraph &g = s.graph;
  const auto n_owned = g.n_centers, n_nodes = static_cast<int64_t>(g.node_atom.size());
  check_distances();

  // Rows of the per-atom buffer <-> rows of the graph's nodes [first, first + count).
  auto to_atoms = [&](const torch::Tensor &rows, int64_t first) {
    std::fill(s.features.begin(), s.features.end(), 0.0);
    const double *r = rows.data_ptr<double>();
    for (int64_t k = 0; k < rows.size(0); k++)
      std::copy(r + k * width, r + (k + 1) * width, s.features.begin() + g.node_atom[first + k] * width);
  };
  auto from_atoms = [&](int64_t first, int64_t count) {
    torch::Tensor rows = torch::empty({count, width}, torch::kFloat64);
    double *r = rows.data_ptr<double>();
    for (int64_t k = 0; k < count; k++)
      std::copy_n(s.features.begin() + g.node_atom[first + k] * width, width, r + k * width);
    return rows;
  };
  mlip::FeatureExchange exchange;
  exchange.forward = [&](const torch::Tensor &owned) {
    s.features.assign(static_cast<std::size_t>(nall) * width, 0.0);
    to_atoms(owned, 0);
    forward_comm_of(comm, this, 0);
    return from_atoms(n_owned, n_nodes - n_owned);
  };
  exchange.reverse = [&](const torch::Tensor &ghost_grad) {
    s.features.assign(static_cast<std::size_t>(nall) * width, 0.0);
    to_atoms(ghost_grad, n_owned);
    s.reverse = Impl::Reverse::features;
    reverse_comm_of(comm, this, 0);
    s.reverse = Impl::Reverse::deviation;
    return from_atoms(0, n_owned);
  };

  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  const mlip::GraphView view = mlip::graph_view(g);
  mlip::ModelOutput out;
  guarded(error, false, "model evaluation failed",
          [&] { out = mlip::evaluate_exchanging(*s.model, view, exchange, chunk_size); });
  if (timing) add_time(MODEL, std::chrono::duration<double>(Clock::now() - t0).count());
  t0 = Clock::now();
  mlip::EdgeForceRequest request;
  request.virial = vflag_global != 0;
  request.node_virial = vflag_atom || cvflag_atom;
  mlip::EdgeForces ef;
  guarded(error, false, "forces", [&] { ef = mlip::edge_forces(view, out.edge_grad, request); });
  to_lammps_units(out, ef);
  add_outputs(out.atom_energy.data_ptr<double>(), ef);
  if (timing) add_time(FORCES, std::chrono::duration<double>(Clock::now() - t0).count());
}

/* ----------------------------------------------------------------------
   the exchange's communication: rows of Impl::features
------------------------------------------------------------------------- */

int PairMLIP::pack_forward_comm(int n, int *list, double *buf, int /*pbc_flag*/, int * /*pbc*/)
{
  const int width = impl->feature_width;
  const double *f = impl->features.data();
  for (int i = 0; i < n; i++) std::copy_n(f + static_cast<std::size_t>(list[i]) * width, width, buf + i * width);
  return n * width;
}

void PairMLIP::unpack_forward_comm(int n, int first, double *buf)
{
  const int width = impl->feature_width;
  std::copy_n(buf, static_cast<std::size_t>(n) * width, impl->features.begin() + static_cast<std::size_t>(first) * width);
}

int PairMLIP::pack_feature_rows(int n, int first, double *buf)
{
  const int width = impl->feature_width;
  std::copy_n(impl->features.begin() + static_cast<std::size_t>(first) * width, static_cast<std::size_t>(n) * width, buf);
  return n * width;
}

void PairMLIP::add_feature_rows(int n, int *list, double *buf)
{
  const int width = impl->feature_width;
  double *f = impl->features.data();
  for (int i = 0; i < n; i++)
    for (int k = 0; k < width; k++) f[static_cast<std::size_t>(list[i]) * width + k] += buf[i * width + k];
}
