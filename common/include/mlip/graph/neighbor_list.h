// Neighbour lists by cell binning, O(N) in the number of atoms; small cells (the cutoff below
// half of every periodic width, and fewer pairs than the bins would screen: the frames of most
// training sets) by every pair at its nearest image.
//
// Handles fully periodic, mixed and non-periodic boxes, orthogonal and strongly skewed triclinic
// cells, cutoffs larger than half a cell width (several images of one atom), and atoms outside the
// cell (unwrapped coordinates).
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "mlip/data/structure.h"

namespace mlip {

/// A full neighbour list (both i->j and j->i). Edge e connects centre `centers[e]` to neighbour
/// `neighbors[e]` with edge vector r = x[neighbors[e]] + shifts[e] . lattice - x[centers[e]],
/// |r| < cutoff, computed from the positions as given (not wrapped).
struct NeighborList {
  std::vector<int64_t> centers;                 // (n_edges)
  std::vector<int64_t> neighbors;               // (n_edges)
  std::vector<std::array<int32_t, 3>> shifts;   // (n_edges) integer cell shifts
  std::vector<Vec3> vectors;                    // (n_edges) edge vectors r_ij in Å (empty without NeighborOptions::vectors)

  std::size_t size() const { return centers.size(); }
};

struct NeighborOptions {
  /// Atoms closer than this (Å) are an error naming both atoms: overlapping atoms are bad data,
  /// not physics. Set to 0 to disable.
  double min_distance = 0.1;
  /// Sort edges by (centre, neighbour, shift), which makes the output independent of binning.
  bool sort = true;
  /// Keep the edge vectors (who needs only indices and shifts saves their memory and its writes).
  bool vectors = true;
};

/// Builds the full neighbour list of `s` for `cutoff` (Å). Throws mlip::Error (naming
/// `s.origin`) on a non-positive cutoff, a singular periodic cell or overlapping atoms.
NeighborList build_neighbor_list(const Structure& s, double cutoff, const NeighborOptions& opts = {});

/// O(N^2 * images) reference used by tests: same output contract as build_neighbor_list.
NeighborList build_neighbor_list_brute_force(const Structure& s, double cutoff);

}  // namespace mlip
