// Graphs with static shapes: what a CUDA graph can record (mlip/model/graph_capture.h).
//
// A model's forward() picks each embedding net's edges and each species' centres on the device
// (nonzero), so its tensor shapes depend on the data and a CUDA graph cannot record it. A
// grouped graph carries the same atoms and edges, reordered on the host so that
//   - centres come first, grouped by species (group t: the centres of species t),
//   - edges come grouped by embedding net (se_e2_a: the neighbour's species, or the pair's),
// each group padded to a capacity. forward_grouped() (mlip/model/model.h: ModelInfo::grouped_forward)
// then takes each group as a slice of known size.
//
// Padding policy: a group's capacity is its size the first time, plus 10%, rounded up to a
// multiple of 32 (every group of centres, of edges and the other nodes alike); when a later
// graph outgrows a group, that group grows again by the same rule, and a recorded CUDA graph is
// recorded anew. Capacities never shrink. Padding edges run from a centre to itself (slot k's from
// centre k mod centres), at a length beyond the cutoff (2 x cutoff): every term of se_e2_a (and of
// the repulsion prior) is exactly zero there, with a zero derivative, so they change no energy and
// no force. Padding
// centres have no real edges; their energies are dropped. Padding nodes after the centres are
// never referenced.
//
// Message-passing models (PaiNN; GroupingRule::message_passing) take a halo: other nodes that
// send along their own edges. Their edges come in two groups: the edges into centres, then the
// rest (the last layer takes only the first group, by narrowing). Their terms are not zero beyond
// the cutoff, so padding edges join padding centres to themselves (at the cutoff's length; the
// padding centres in turn: padding_edge_ends()): every group of centres keeps a free slot (it
// grows when its count reaches its capacity), and what reaches a padding centre never reaches a
// real node.
#pragma once

#include <cstdint>
#include <vector>

#include "mlip/model/model.h"

namespace mlip {

struct ModelMetadata;

/// How a model groups a graph: its species, whether it has one embedding net per (centre,
/// neighbour) species pair, and the distances it accepts.
struct GroupingRule {
  int64_t n_species = 0;
  bool pair_nets = false;          // se_e2_a's type_one_side: false
  double pad_length = 0.0;         // length of padding edges, beyond the cutoff (Å)
  double shortest = 0.0;           // edges shorter than this are an error (compressed models' tables)
  bool message_passing = false;    // edges grouped into centres / the rest; padding on padding centres

  /// The rule for a model with a forward_grouped() (throws mlip::Error otherwise).
  static GroupingRule of(const Model& model);
  /// The same from a model's metadata (its grouped_forward says whether it has one).
  static GroupingRule of(const ModelMetadata& meta);
};

/// Group sizes: centres per species, edges per net, other nodes.
struct GroupCapacity {
  std::vector<int64_t> centers, edges;
  int64_t others = 0;
  bool operator==(const GroupCapacity& o) const {
    return centers == o.centers && edges == o.edges && others == o.others;
  }
};

/// A graph grouped and padded to a capacity (host memory), with where each original node and
/// edge went.
struct GroupedGraph {
  GroupCapacity capacity;
  std::vector<int64_t> species;        // (nodes)
  std::vector<int64_t> edge_index;     // (2, edges), row-major
  std::vector<double> edge_vectors;    // (edges, 3)
  std::vector<int64_t> node_position;  // original node -> its node here
  std::vector<int64_t> edge_position;  // original edge -> its edge here

  int64_t n_centers() const;
  int64_t n_edges() const { return static_cast<int64_t>(edge_vectors.size() / 3); }
  GraphView view() const;
};

/// The next capacity for a group of `count` (the policy above).
int64_t grouped_capacity(int64_t count);

/// Grows each `cap[t]` that `count[t]` outgrows (or, with `spare`, that a non-empty group would
/// fill with no slot left free) to grouped_capacity() of it; `cap` takes count's size. Returns
/// whether anything changed. No entry ever shrinks.
bool grow_capacities(const std::vector<int64_t>& count, std::vector<int64_t>& cap, bool spare = false);

/// The node each padding edge joins to itself where groups of `centers` nodes are padded to
/// `center_cap` and groups of `edges` edges to `edge_cap` (group after group): the k-th padding
/// edge (each group's slots past its count, in order) takes the k-th padding node modulo their
/// number, so that no node's sums (on a GPU one thread's loop over its edges, or atomics onto its
/// row) take more than their share of them. Throws mlip::Error where there are padding edges but
/// no padding node.
std::vector<int64_t> padding_edge_ends(const std::vector<int64_t>& centers, const std::vector<int64_t>& center_cap,
                                       const std::vector<int64_t>& edges, const std::vector<int64_t>& edge_cap);

/// Groups `graph` (host memory) by `rule` into `out`, growing `capacity` where a group outgrows
/// it (an empty capacity is sized from this graph). Returns whether `capacity` changed. Throws
/// mlip::Error on a species or index out of range, or an edge shorter than rule.shortest.
bool group_graph(const GraphView& graph, const GroupingRule& rule, GroupCapacity& capacity, GroupedGraph& out);

/// Evaluates a grouped graph with forward_grouped() and returns energies and edge gradients in
/// the original graph's order (float64, on the CPU): the same as evaluate_graph() on the
/// original, up to rounding.
ModelOutput evaluate_grouped(const Model& model, const GroupedGraph& graph, int64_t n_centers, bool need_grad);

/// The outputs of a grouped evaluation (energies of all padded centres, gradients of all padded
/// edges, on any device) in the original graph's order, float64 on the CPU.
ModelOutput ungroup_output(const GroupedGraph& graph, int64_t n_centers, const ModelOutput& grouped);

}  // namespace mlip
