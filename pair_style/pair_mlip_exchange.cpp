/* ----------------------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.

   Message passing by per-layer ghost exchange ('pair_style mlip model.pt exchange yes'): the
   ghost shell is one cutoff (+ skin) wide whatever the number of layers. Every local atom is a
   centre of one graph whose other nodes are the ghosts within the cutoff; each layer updates the
   local atoms only, and the ghosts' features are refreshed from their owners by forward
   communication before the next layer. In the backward pass the ghosts' feature gradients go
   back to their owners by reverse communication, layer by layer (mlip::evaluate_exchanging,
   common/src/model/message_passing.cpp). Forces and virials follow from the edge gradients as for any
   model. For models that define their layers (mp_* methods: PaiNN and MACE written by this version).
   With more local atoms than 'chunk N', each layer takes them N at a time and the backward pass
   evaluates each chunk's layer again, so that memory is bounded by the chunk.
   Also mlip/kk (host backends), whose graph comes from its Kokkos kernels. Not yet: committees.

   GhostExchange owns the decision, the feature buffer and its communication; PairMLIP's part
   (below) builds the graph and hands it over.
------------------------------------------------------------------------- */

#include "pair_mlip.h"
#include "pair_mlip_impl.h"

#include "atom.h"
#include "comm.h"
#include "neigh_list.h"

#include "mlip/model/message_passing.h"

#include <ATen/Dispatch.h>

#include <algorithm>
#include <chrono>

using namespace LAMMPS_NS;

/* ----------------------------------------------------------------------
   GhostExchange::init: whether to exchange features (settings()): 'exchange yes|no', or by
   default for every model that defines its layers (not for committees, nor mlip/kk on a device)
------------------------------------------------------------------------- */

void GhostExchange::init(Asked asked, const mlip::Model &model, const std::string &file, bool committee,
                         bool kokkos_device)
{
  const int n = mlip::exchange_layers(model);
  const int layers = model.info().message_passing_layers;
  // Not given: exchange for every model that defines its layers, where it is available.
  on_ = asked == Asked::yes || (asked == Asked::automatic && n > 1 && !committee && !kokkos_device);
  width_ = 0;
  features_ = torch::Tensor();
  if (layers > 1 && !on_ && comm->me == 0)
    utils::logmesg(lmp, "pair_style mlip: message passing over a halo of {} cutoffs ({})\n", layers,
                   asked == Asked::no ? "'exchange no'"
                   : n < 2            ? "the model file does not define its layers: export it again with this mlip "
                                        "for ghost exchange"
                   : committee        ? "a committee" : "mlip/kk on a device");
  if (!on_) return;
  check_available(n, layers, file, committee, kokkos_device);
  guarded(error, true, "exchange", [&] { width_ = static_cast<int>(mlip::exchange_feature_width(model)); });
  if (comm->me == 0)
    utils::logmesg(lmp, "pair_style mlip: {} layers with ghost exchange: ghost shell of one cutoff, {} values per "
                        "atom forward-communicated after each layer but the last and reverse-communicated in the "
                        "backward pass\n", n, width_);
}

// 'exchange yes' where it cannot be had: an error that says why and what to do instead.
void GhostExchange::check_available(int exchange_layers, int layers, const std::string &file, bool committee,
                                    bool kokkos_device)
{
  if (committee)
    error->all(FLERR, "pair_style mlip: 'exchange yes' is not available for a committee yet (the deviation's "
                      "models take the halo path): use 'exchange no'");
  if (kokkos_device)
    error->all(FLERR, "pair_style mlip/kk: 'exchange yes' communicates features through host buffers and is not "
                      "available for a Kokkos device backend yet: use mlip/kk/host or 'exchange no'");
  if (exchange_layers < 2)
    error->all(FLERR, fmt::format("pair_style mlip: 'exchange yes' needs a message-passing model that defines its "
                                  "layers (mp_* methods, written by this mlip); '{}' {}",
                                  file, layers > 1 ? "is from an older mlip: export it again" : "is local"));
}

/* ----------------------------------------------------------------------
   GhostExchange::evaluate: the model layer by layer; between layers the ghosts' features come
   from their owners (forward communication), in the backward pass their gradients go back
   (reverse); the buffer lives for one communication
------------------------------------------------------------------------- */

mlip::ModelOutput GhostExchange::evaluate(PairMLIP &pair, const mlip::Model &model, const mlip::GraphView &graph,
                                          const int *node_atom, const std::vector<int64_t> &chunk_end)
{
  const int nall = atom->nlocal + atom->nghost;
  const int64_t n_owned = graph.n_centers, n_nodes = graph.n_nodes;
  mlip::FeatureExchange exchange;
  exchange.forward = [&](const torch::Tensor &owned) {
    to_atoms(owned, node_atom, 0, nall);
    pair.forward_comm(*this);
    return from_atoms(node_atom, n_owned, n_nodes - n_owned);
  };
  exchange.reverse = [&](const torch::Tensor &ghost_grad) {
    to_atoms(ghost_grad, node_atom, n_owned, nall);
    pair.reverse_comm(*this);
    return from_atoms(node_atom, 0, n_owned);
  };
  mlip::ModelOutput out;
  guarded(error, false, "model evaluation failed",
          [&] { out = mlip::evaluate_exchanging(model, graph, exchange, chunk_end); });
  return out;
}

namespace {
torch::Tensor atom_index(const int *node_atom, int64_t first, int64_t count)
{
  return torch::from_blob(const_cast<int *>(node_atom + first), {count}, torch::kInt32).to(torch::kInt64);
}
}    // namespace

void GhostExchange::to_atoms(const torch::Tensor &rows, const int *node_atom, int64_t first, int nall)
{
  features_ = torch::zeros({nall, width_}, rows.options());
  features_.index_copy_(0, atom_index(node_atom, first, rows.size(0)), rows);
}

torch::Tensor GhostExchange::from_atoms(const int *node_atom, int64_t first, int64_t count)
{
  torch::Tensor rows = features_.index_select(0, atom_index(node_atom, first, count));
  features_ = torch::Tensor();
  return rows;
}

/* ----------------------------------------------------------------------
   GhostExchange's communication: the buffer's rows as doubles (exact for float32), and back
------------------------------------------------------------------------- */

int GhostExchange::pack_forward(int n, const int *list, double *buf) const
{
  AT_DISPATCH_FLOATING_TYPES(features_.scalar_type(), "pack_forward", [&] {
    const scalar_t *f = features_.data_ptr<scalar_t>();
    for (int i = 0; i < n; i++) std::copy_n(f + static_cast<std::size_t>(list[i]) * width_, width_, buf + i * width_);
  });
  return n * width_;
}

void GhostExchange::unpack_forward(int n, int first, const double *buf)
{
  AT_DISPATCH_FLOATING_TYPES(features_.scalar_type(), "unpack_forward", [&] {
    std::copy_n(buf, static_cast<std::size_t>(n) * width_,
                features_.data_ptr<scalar_t>() + static_cast<std::size_t>(first) * width_);
  });
}

int GhostExchange::pack_reverse(int n, int first, double *buf) const
{
  AT_DISPATCH_FLOATING_TYPES(features_.scalar_type(), "pack_reverse", [&] {
    std::copy_n(features_.data_ptr<scalar_t>() + static_cast<std::size_t>(first) * width_,
                static_cast<std::size_t>(n) * width_, buf);
  });
  return n * width_;
}

void GhostExchange::unpack_reverse(int n, const int *list, const double *buf)
{
  AT_DISPATCH_FLOATING_TYPES(features_.scalar_type(), "unpack_reverse", [&] {
    scalar_t *f = features_.data_ptr<scalar_t>();
    for (int i = 0; i < n; i++)
      for (int k = 0; k < width_; k++) f[static_cast<std::size_t>(list[i]) * width_ + k] += buf[i * width_ + k];
  });
}

/* ----------------------------------------------------------------------
   PairMLIP::compute_exchanging: one graph of all local atoms and their ghosts within the
   cutoff, evaluated by the exchange
------------------------------------------------------------------------- */

void PairMLIP::compute_exchanging()
{
  Impl &s = *impl;
  // Centres in spatially compact chunks: a chunk's layer reaches fewer other nodes.
  s.order.assign(list->ilist, list->ilist + list->inum);
  const double *const *x = atom->x;
  mlip::split_compact(s.order, options.chunk, [x](int i) { return x[i]; }, s.chunk_end);
  build_graph(s.order.data(), s.order.data() + s.order.size(), 0, /*one_hop=*/true);    // ghosts within rc
  check_distances();
  using Clock = std::chrono::steady_clock;
  auto t0 = Clock::now();
  const mlip::GraphView view = mlip::graph_view(s.graph);
  mlip::ModelOutput out =
      evaluate_exchanging(view, s.graph.node_atom.data(), std::vector<int64_t>(s.chunk_end.begin(), s.chunk_end.end()));
  add_time(MODEL, std::chrono::duration<double>(Clock::now() - t0).count());
  t0 = Clock::now();
  mlip::EdgeForceRequest request;
  request.virial = vflag_global != 0;
  request.node_virial = vflag_atom || cvflag_atom;
  mlip::EdgeForces ef;
  guarded(error, false, "forces", [&] { ef = mlip::edge_forces(view, out.edge_grad, request); });
  to_lammps_units(out, ef);
  add_outputs(out.atom_energy.data_ptr<double>(), ef, s.graph.node_atom.data(), s.graph.n_centers);
  add_time(FORCES, std::chrono::duration<double>(Clock::now() - t0).count());
}

/* ----------------------------------------------------------------------
   PairMLIP::evaluate_exchanging: the exchange on a graph of all local atoms (the centres) and
   ghosts, in chunks of options.chunk unless chunk_end says otherwise. Shared with mlip/kk.
------------------------------------------------------------------------- */

mlip::ModelOutput PairMLIP::evaluate_exchanging(const mlip::GraphView &graph, const int *node_atom,
                                                std::vector<int64_t> chunk_end)
{
  if (chunk_end.empty())    // chunks of options.chunk in the graph's order
    for (int64_t end = 0; end < graph.n_centers || chunk_end.empty();)
      chunk_end.push_back(end = std::min<int64_t>(end + options.chunk, graph.n_centers));
  return impl->exchange.evaluate(*this, *impl->model, graph, node_atom, chunk_end);
}

bool PairMLIP::exchanging() const
{
  return impl->exchange.on();
}
