// The graph of a chunk of centre atoms, as the model contract wants it: the chunk's centres are
// nodes [0, n_centers), the neighbours they reach follow. Used wherever atoms are evaluated in
// chunks (LAMMPS, benchmarks, large-structure evaluation), so that memory per call is bounded
// by the chunk size and the working set stays in cache. Buffers are reused between calls.
#pragma once

#include <cstdint>
#include <vector>

namespace mlip {

class ChunkGraph {
 public:
  std::vector<int> node_atom;         // (n_nodes) caller's atom index of each node
  std::vector<int64_t> species;       // (n_nodes) model species index
  std::vector<int64_t> edge_index;    // (2 * n_edges): centre nodes, then neighbour nodes
  std::vector<double> edge_vectors;   // (n_edges * 3) r_ij, Å
  int64_t n_centers = 0;
  int64_t n_edges = 0;

  /// Builds the graph of `centers` (caller's atom indices, n_atoms in all).
  ///   species_of(i) -> model species index, or -1 for atoms the model skips;
  ///   for_each_neighbor(i, visit) calls visit(j, dx, dy, dz) for each neighbour j of i with
  ///   r_ij = (dx, dy, dz); edges at or beyond `cutoff` are dropped here.
  template <typename SpeciesOf, typename ForEachNeighbor>
  void build(const std::vector<int>& centers, int n_atoms, double cutoff, SpeciesOf&& species_of,
             ForEachNeighbor&& for_each_neighbor) {
    if (static_cast<int>(atom_node_.size()) < n_atoms) atom_node_.resize(n_atoms, -1);
    node_atom.clear();
    species.clear();
    edge_index.clear();
    neighbor_nodes_.clear();
    edge_vectors.clear();
    for (int i : centers) {
      const int s = species_of(i);
      if (s < 0) continue;
      atom_node_[i] = static_cast<int>(node_atom.size());
      node_atom.push_back(i);
      species.push_back(s);
    }
    n_centers = static_cast<int64_t>(node_atom.size());
    const double cut2 = cutoff * cutoff;
    for (int64_t c = 0; c < n_centers; ++c) {
      for_each_neighbor(node_atom[c], [&](int j, double dx, double dy, double dz) {
        if (dx * dx + dy * dy + dz * dz >= cut2) return;
        const int s = species_of(j);
        if (s < 0) return;
        if (atom_node_[j] < 0) {
          atom_node_[j] = static_cast<int>(node_atom.size());
          node_atom.push_back(j);
          species.push_back(s);
        }
        edge_index.push_back(c);
        neighbor_nodes_.push_back(atom_node_[j]);
        edge_vectors.insert(edge_vectors.end(), {dx, dy, dz});
      });
    }
    for (int a : node_atom) atom_node_[a] = -1;  // ready for the next chunk
    n_edges = static_cast<int64_t>(neighbor_nodes_.size());
    edge_index.insert(edge_index.end(), neighbor_nodes_.begin(), neighbor_nodes_.end());
  }

 private:
  std::vector<int> atom_node_;           // (n_atoms) node of an atom in the current chunk, or -1
  std::vector<int64_t> neighbor_nodes_;  // scratch
};

}  // namespace mlip
