// Message-passing models evaluated one layer at a time, with the features of ghost nodes
// exchanged between layers (LAMMPS's forward communication) and their gradients handed back to
// the owners in the backward pass (reverse communication). The ghost shell then needs to be one
// cutoff wide whatever the number of layers, instead of a halo of layers x cutoff whose atoms
// are all evaluated again.
//
// An architecture supports it by defining, beside forward() (which composes them; PaiNN in
// potentials/src/painn.cpp):
//   mp_edges(edge_vectors) -> (radial terms...)                     per-edge tensors (PaiNN: 2)
//   mp_embed(species) -> (s, v)                                     features before layer 0
//   mp_node_<k>(features...) -> node term(s)                        e.g. networks of the senders
//   mp_layer_<k>(features..., node terms..., center, neighbor, radial terms..., n_out) -> (features...)
//                                            layer k: messages into, and updates of, nodes [0, n_out)
//   mp_readout(species, s, edge_index, edge_vectors, n_centers) -> (n_centers,) energies
// Model files written before these parts existed, and local models, have none of them.
#pragma once

#include <functional>
#include <vector>

#include "mlip/model/model.h"

namespace mlip {

/// How the caller moves node features between the owned nodes [0, n_owned) of a graph and its
/// ghost nodes [n_owned, n_nodes) (copies of atoms owned elsewhere: other ranks, or periodic
/// images). Rows are nodes; columns are all features of a node, flattened (CPU, in the model's
/// dtype: float32 features move as float32 rows).
/// Both are called the same number of times on every rank, whatever its number of atoms.
struct FeatureExchange {
  /// The ghosts' features from their owners': (n_owned, D) -> (n_nodes - n_owned, D).
  std::function<torch::Tensor(const torch::Tensor& owned)> forward;
  /// The ghosts' feature gradients, (n_nodes - n_owned, D) -> what to add to the owned nodes'
  /// gradients, (n_owned, D).
  std::function<torch::Tensor(const torch::Tensor& ghost_grad)> reverse;
};

/// The number of layers whose parts the model defines; 0 if it cannot be evaluated this way.
int exchange_layers(const Model& model);

/// Features per node (all of a node's feature tensors, flattened): the width D of the exchange.
int64_t exchange_feature_width(const Model& model);

/// Energies of the owned nodes [0, graph.n_centers) and dE/dr_ij of every edge (each edge must
/// start at an owned node and end at any node), where E is the energy of all owned nodes of all
/// ranks: the ghosts' feature gradients are exchanged back, so the edge gradients include what
/// other ranks' energies owe to this rank's edges. Forces and virials then follow from
/// edge_forces() as for any model, exactly. Results as evaluate_graph(): float64, graph's device.
/// `chunk` > 0: the layers take the owned nodes `chunk` at a time, and the backward evaluates
/// each chunk's layer (node terms included) again instead of keeping its autograd graph, so that
/// memory is bounded by a chunk's edges (plus the nodes' features of every layer and one layer's
/// input gradients) at the cost of a second forward.
/// The results do not depend on it beyond round-off.
ModelOutput evaluate_exchanging(const Model& model, const GraphView& graph, const FeatureExchange& exchange,
                                int64_t chunk = 0);

/// The same with chunks of any sizes: the centres [chunk_end[k-1], chunk_end[k]) (the last end
/// is n_centers; a single end means one chunk), e.g. spatially compact ones.
ModelOutput evaluate_exchanging(const Model& model, const GraphView& graph, const FeatureExchange& exchange,
                                const std::vector<int64_t>& chunk_end);

}  // namespace mlip
