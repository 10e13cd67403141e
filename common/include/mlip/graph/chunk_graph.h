// The graph of a chunk of centre atoms, as the model contract wants it: the chunk's centres are
// nodes [0, n_centers), the neighbours they reach follow. Used wherever atoms are evaluated in
// chunks (LAMMPS, benchmarks, large-structure evaluation), so that memory per call is bounded
// by the chunk size and the working set stays in cache. Buffers are reused between calls.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
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

  /// Builds the graph of the centres [first, last) (caller's atom indices, n_atoms in all).
  ///   species_of(i) -> model species index, or -1 for atoms the model skips;
  ///   for_each_neighbor(i, visit) calls visit(j, dx, dy, dz) for each neighbour j of i with
  ///   r_ij = (dx, dy, dz); edges at or beyond `cutoff` are dropped here.
  ///   hops: how far messages travel, the model's message-passing depth L (1 for local
  ///   models). Atoms within hops - 1 of a centre (the halo) are added hop by hop with all their
  ///   edges, those at `hops` only send; so for_each_neighbor must give complete neighbour
  ///   lists out to hops - 1 (LAMMPS: ghost neighbour lists and a wide enough ghost shell).
  ///   Energies come for the centres only: the halo's are another chunk's or another rank's.
  template <typename SpeciesOf, typename ForEachNeighbor>
  void build(const int* first, const int* last, int n_atoms, double cutoff, SpeciesOf&& species_of,
             ForEachNeighbor&& for_each_neighbor, int hops = 1) {
    if (static_cast<int>(atom_node_.size()) < n_atoms) atom_node_.resize(n_atoms, -1);
    node_atom.clear();
    species.clear();
    edge_index.clear();
    neighbor_nodes_.clear();
    edge_vectors.clear();
    for (const int* p = first; p != last; ++p) {
      const int s = species_of(*p);
      if (s < 0) continue;
      atom_node_[*p] = static_cast<int>(node_atom.size());
      node_atom.push_back(*p);
      species.push_back(s);
    }
    n_centers = static_cast<int64_t>(node_atom.size());
    const double cut2 = cutoff * cutoff;
    std::size_t hop_begin = 0, hop_end = node_atom.size();
    for (int hop = 0; hop < hops; ++hop) {
      for (std::size_t c = hop_begin; c < hop_end; ++c) {
        for_each_neighbor(node_atom[c], [&](int j, double dx, double dy, double dz) {
          if (dx * dx + dy * dy + dz * dz >= cut2) return;
          const int s = species_of(j);
          if (s < 0) return;
          if (atom_node_[j] < 0) {
            atom_node_[j] = static_cast<int>(node_atom.size());
            node_atom.push_back(j);
            species.push_back(s);
          }
          edge_index.push_back(static_cast<int64_t>(c));
          neighbor_nodes_.push_back(atom_node_[j]);
          edge_vectors.insert(edge_vectors.end(), {dx, dy, dz});
        });
      }
      hop_begin = hop_end;
      hop_end = node_atom.size();
    }
    for (int a : node_atom) atom_node_[a] = -1;  // ready for the next chunk
    n_edges = static_cast<int64_t>(neighbor_nodes_.size());
    edge_index.insert(edge_index.end(), neighbor_nodes_.begin(), neighbor_nodes_.end());
  }

 private:
  std::vector<int> atom_node_;           // (n_atoms) node of an atom in the current chunk, or -1
  std::vector<int64_t> neighbor_nodes_;  // scratch
};

/// Splits `atoms` (reordered in place) into chunks of at most `chunk` atoms that are compact in
/// space, by recursive coordinate bisection: each cut halves the longest side of a range's
/// bounding box at the balanced position, so chunks are boxes (a small halo per centre, for
/// message-passing models) of nearly equal size, emitted in space order. `chunk_end` gets the
/// end of each chunk in `atoms`; one chunk, in the given order, when there are no more than
/// `chunk` atoms. position_of(i) -> const double* (x, y, z).
template <typename PositionOf>
void split_compact(std::vector<int>& atoms, int chunk, PositionOf&& position_of, std::vector<int>& chunk_end) {
  chunk_end.clear();
  const int n = static_cast<int>(atoms.size());
  if (n == 0) return;
  std::vector<std::pair<int, int>> todo{{0, n}};  // ranges still to cut, depth first
  while (!todo.empty()) {
    const auto [begin, end] = todo.back();
    todo.pop_back();
    const int size = end - begin;
    if (size <= chunk) {
      chunk_end.push_back(end);
      continue;
    }
    const double* p0 = position_of(atoms[begin]);
    double lo[3] = {p0[0], p0[1], p0[2]}, hi[3] = {p0[0], p0[1], p0[2]};
    for (int k = begin; k < end; ++k) {
      const double* p = position_of(atoms[k]);
      for (int d = 0; d < 3; ++d) {
        lo[d] = std::min(lo[d], p[d]);
        hi[d] = std::max(hi[d], p[d]);
      }
    }
    int dim = 0;
    for (int d = 1; d < 3; ++d)
      if (hi[d] - lo[d] > hi[dim] - lo[dim]) dim = d;
    const int parts = (size + chunk - 1) / chunk;
    const int mid = begin + static_cast<int>(static_cast<long long>(size) * (parts / 2) / parts);
    std::nth_element(atoms.begin() + begin, atoms.begin() + mid, atoms.begin() + end,
                     [&](int a, int b) { return position_of(a)[dim] < position_of(b)[dim]; });
    todo.emplace_back(mid, end);  // the lower half is cut (and emitted) first
    todo.emplace_back(begin, mid);
  }
}

}  // namespace mlip
