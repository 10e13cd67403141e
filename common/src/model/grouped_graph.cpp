#include "mlip/model/grouped_graph.h"

#include <cmath>
#include <numeric>
#include <string>

#include "mlip/error.h"
#include "mlip/model/model_metadata.h"
#include "model_internal.h"

namespace mlip {

GroupingRule GroupingRule::of(const Model& model) { return of(model.metadata()); }

GroupingRule GroupingRule::of(const ModelMetadata& meta) {
  if (!meta.grouped_forward) {
    throw Error("a " + meta.architecture + " model" + (meta.message_passing_layers > 0 ? " (message passing)" : "") +
                " has no forward_grouped(): its shapes depend on the data, so a CUDA graph cannot record it "
                "(se_e2_a, PaiNN and MACE models exported by this mlip version have one)");
  }
  GroupingRule rule;
  rule.n_species = static_cast<int64_t>(meta.species.size());
  rule.message_passing = meta.message_passing_layers > 0;
  rule.pair_nets = !rule.message_passing && meta.hyperparameters.is_object() &&
                   !meta.hyperparameters.value("type_one_side", true);
  rule.pad_length = rule.message_passing ? meta.cutoff : 2.0 * meta.cutoff;
  if (meta.compressed) rule.shortest = meta.hyperparameters.value("/compression/min_distance"_json_pointer, 0.0);
  return rule;
}

int64_t GroupedGraph::n_centers() const {
  return std::accumulate(capacity.centers.begin(), capacity.centers.end(), int64_t{0});
}

GraphView GroupedGraph::view() const {
  GraphView v;
  v.species = species.data();
  v.n_nodes = static_cast<int64_t>(species.size());
  v.edge_index = edge_index.data();
  v.edge_index_stride = n_edges();
  v.edge_vectors = edge_vectors.data();
  v.n_edges = n_edges();
  v.n_centers = n_centers();
  return v;
}

int64_t grouped_capacity(int64_t count) {
  if (count <= 0) return 0;
  const auto padded = static_cast<int64_t>(std::ceil(1.1 * static_cast<double>(count)));
  return (padded + 31) / 32 * 32;
}

bool grow_capacities(const std::vector<int64_t>& count, std::vector<int64_t>& cap, bool spare) {
  bool grown = cap.size() != count.size();
  cap.resize(count.size(), 0);
  for (std::size_t t = 0; t < count.size(); ++t) {
    const int64_t need = count[t] + (spare && count[t] > 0 ? 1 : 0);
    if (need > cap[t]) {
      cap[t] = grouped_capacity(need);
      grown = true;
    }
  }
  return grown;
}

std::vector<int64_t> padding_edge_ends(const std::vector<int64_t>& centers, const std::vector<int64_t>& center_cap,
                                       const std::vector<int64_t>& edges, const std::vector<int64_t>& edge_cap) {
  std::vector<int64_t> nodes;   // the padding nodes, group after group
  int64_t at = 0;
  for (std::size_t t = 0; t < center_cap.size(); ++t) {
    for (int64_t i = t < centers.size() ? centers[t] : 0; i < center_cap[t]; ++i) nodes.push_back(at + i);
    at += center_cap[t];
  }
  int64_t n_padding = 0;
  for (std::size_t g = 0; g < edge_cap.size(); ++g) n_padding += edge_cap[g] - (g < edges.size() ? edges[g] : 0);
  if (n_padding > 0 && nodes.empty())
    throw Error("padding edges with no padding node to join (" + std::to_string(n_padding) + " padding edges; an internal error)");
  std::vector<int64_t> ends(static_cast<std::size_t>(n_padding));
  for (std::size_t k = 0; k < ends.size(); ++k) ends[k] = nodes[k % nodes.size()];
  return ends;
}

namespace {

std::vector<int64_t> offsets(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> off(sizes.size() + 1, 0);
  std::partial_sum(sizes.begin(), sizes.end(), off.begin() + 1);
  return off;
}

}  // namespace

bool group_graph(const GraphView& g, const GroupingRule& rule, GroupCapacity& capacity, GroupedGraph& out) {
  const int64_t ns = rule.n_species, n_nets = rule.message_passing ? 2 : rule.pair_nets ? ns * ns : ns;
  const int64_t* row0 = g.edge_index;
  const int64_t* row1 = g.edge_index + g.edge_index_stride;
  std::vector<int64_t> centers(ns, 0), edges(n_nets, 0), net(g.n_edges);
  for (int64_t i = 0; i < g.n_nodes; ++i) {
    if (g.species[i] < 0 || g.species[i] >= ns) {
      throw Error("grouped graph: node " + std::to_string(i) + " has species index " + std::to_string(g.species[i]) +
                  ", outside the model's " + std::to_string(ns));
    }
    if (i < g.n_centers) ++centers[g.species[i]];
  }
  for (int64_t e = 0; e < g.n_edges; ++e) {
    const int64_t c = row0[e], j = row1[e];
    // A message-passing graph's halo nodes send along their own edges; else every edge has a centre.
    const int64_t centres = rule.message_passing ? g.n_nodes : g.n_centers;
    if (c < 0 || c >= centres || j < 0 || j >= g.n_nodes) {
      throw Error("grouped graph: edge " + std::to_string(e) + " (" + std::to_string(c) + " -> " + std::to_string(j) +
                  ") is outside its " + std::to_string(g.n_centers) + " centres and " + std::to_string(g.n_nodes) +
                  " nodes");
    }
    const double* r = g.edge_vectors + 3 * e;
    const double r2 = r[0] * r[0] + r[1] * r[1] + r[2] * r[2];
    if (!std::isfinite(r2)) {
      throw Error("grouped graph: edge " + std::to_string(c) + " -> " + std::to_string(j) +
                  " has a non-finite vector (positions not finite?)");
    }
    if (r2 < rule.shortest * rule.shortest) {
      throw Error("compressed model: a neighbour is closer than its embedding table covers (made for distances >= " +
                  std::to_string(rule.shortest) + " A; edge " + std::to_string(c) + " -> " + std::to_string(j) +
                  " has " + std::to_string(std::sqrt(r2)) +
                  "): recompress with a smaller --min-distance, or use the uncompressed model");
    }
    net[e] = rule.message_passing ? (c < g.n_centers ? 0 : 1)
             : rule.pair_nets     ? g.species[c] * ns + g.species[j]
                                  : g.species[j];
    ++edges[net[e]];
  }
  bool grown = grow_capacities(centers, capacity.centers, /*spare=*/rule.message_passing);
  grown = grow_capacities(edges, capacity.edges) || grown;
  if (g.n_nodes - g.n_centers > capacity.others) {
    capacity.others = grouped_capacity(g.n_nodes - g.n_centers);
    grown = true;
  }

  out.capacity = capacity;
  const std::vector<int64_t> center_at = offsets(capacity.centers), edge_at = offsets(capacity.edges);
  const int64_t n_centers = center_at.back(), n_edges = edge_at.back();
  out.species.assign(n_centers + capacity.others, 0);
  for (int64_t t = 0; t < ns; ++t)
    std::fill(out.species.begin() + center_at[t], out.species.begin() + center_at[t + 1], t);
  out.node_position.resize(g.n_nodes);
  std::vector<int64_t> next(center_at.begin(), center_at.end() - 1);
  for (int64_t i = 0; i < g.n_nodes; ++i) {
    const int64_t at = i < g.n_centers ? next[g.species[i]]++ : n_centers + (i - g.n_centers);
    out.node_position[i] = at;
    out.species[at] = g.species[i];
  }
  // Padding edges: slot e's centre (e mod centres) to itself, beyond the cutoff, where every term
  // is zero (spread over the centres: an index_add onto one row would take them in a row); for
  // message passing, whose terms are not zero there, the padding centres in turn
  // (grow_capacities() kept one free in each non-empty group).
  out.edge_index.resize(2 * n_edges);
  for (int64_t e = 0; e < n_edges; ++e) out.edge_index[e] = out.edge_index[n_edges + e] = e % std::max<int64_t>(n_centers, 1);
  if (rule.message_passing && n_centers > 0) {
    const std::vector<int64_t> ends = padding_edge_ends(centers, capacity.centers, edges, capacity.edges);
    std::size_t k = 0;
    for (int64_t net_of = 0; net_of < n_nets; ++net_of)
      for (int64_t e = edge_at[net_of] + edges[net_of]; e < edge_at[net_of + 1]; ++e, ++k)
        out.edge_index[e] = out.edge_index[n_edges + e] = ends[k];
  }
  out.edge_vectors.assign(3 * n_edges, 0.0);
  for (int64_t e = 0; e < n_edges; ++e) out.edge_vectors[3 * e] = rule.pad_length;
  out.edge_position.resize(g.n_edges);
  next.assign(edge_at.begin(), edge_at.end() - 1);
  for (int64_t e = 0; e < g.n_edges; ++e) {
    const int64_t at = next[net[e]]++;
    out.edge_position[e] = at;
    out.edge_index[at] = out.node_position[row0[e]];
    out.edge_index[n_edges + at] = out.node_position[row1[e]];
    for (int k = 0; k < 3; ++k) out.edge_vectors[3 * at + k] = g.edge_vectors[3 * e + k];
  }
  return grown;
}

ModelOutput ungroup_output(const GroupedGraph& graph, int64_t n_centers, const ModelOutput& grouped) {
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  const torch::Tensor nodes =
      torch::from_blob(const_cast<int64_t*>(graph.node_position.data()), {n_centers}, i64);
  const torch::Tensor edges = torch::from_blob(const_cast<int64_t*>(graph.edge_position.data()),
                                               {static_cast<int64_t>(graph.edge_position.size())}, i64);
  ModelOutput out;
  out.atom_energy = grouped.atom_energy.to(torch::kCPU, torch::kFloat64).index_select(0, nodes);
  if (grouped.edge_grad.defined()) {
    out.edge_grad = grouped.edge_grad.to(torch::kCPU, torch::kFloat64).index_select(0, edges);
  }
  return out;
}

ModelOutput evaluate_grouped(const Model& model, const GroupedGraph& graph, int64_t n_centers, bool need_grad) {
  const GraphView v = graph.view();
  if (v.n_centers == 0) {   // nothing to evaluate: the padding edges would have no centre
    ModelOutput out;
    out.atom_energy = torch::zeros({0}, torch::kFloat64);
    if (need_grad) out.edge_grad = torch::zeros({static_cast<int64_t>(graph.edge_position.size()), 3}, torch::kFloat64);
    return out;
  }
  ModelInput in = detail::model_input(model, v);
  in.center_groups = graph.capacity.centers;
  in.edge_groups = graph.capacity.edges;
  return ungroup_output(graph, n_centers, model.evaluate(in, need_grad));
}

}  // namespace mlip
