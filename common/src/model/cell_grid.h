// The cell grid of the device graphs (device_graph.cpp, device_step.cpp), chosen on the host from
// the atoms' bounding box; not installed.
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "../ops/graph_elements.h"

namespace mlip::detail {

/// Cells per axis over the box [lo, hi]: cells at least `width` wide, at most 2^20 a side.
inline std::array<int64_t, 3> grid_dims(const double* lo, const double* hi, double width) {
  std::array<int64_t, 3> dims{1, 1, 1};
  for (int d = 0; d < 3; ++d) {
    const double cells = std::floor((hi[d] - lo[d]) / width);
    dims[d] = std::clamp<int64_t>(static_cast<int64_t>(std::min(cells, 1e9)), 1, int64_t{1} << 20);
  }
  return dims;
}

/// The lists of a grid of `dims` over n atoms (kernels::CellGrid::buckets): one per cell, or,
/// where that would make more than about 8 per atom, that many, the cells hashed into them.
inline int64_t grid_buckets(const int64_t* dims, int64_t n) {
  const int64_t most = 8 * n + 64;
  int64_t total = 1;
  for (int d = 0; d < 3; ++d) {
    total *= dims[d];
    if (total > most) return most;   // before a product of three 2^20 could overflow
  }
  return total;
}

/// The grid's frame (kernels::CellGrid::frame): its corner lo, then cells per Å on each axis,
/// never more than 1 / cutoff (cells never narrower than the cutoff, whatever dims are), less a
/// part in 1e9: a pair just inside the cutoff, its cell coordinates rounded (up to 2^20 cells a
/// side: about 2e-10 of a cell), is never two cells apart.
inline void grid_frame(const double* lo, const double* hi, const int64_t* dims, double cutoff, double* frame) {
  for (int d = 0; d < 3; ++d) {
    const double extent = hi[d] - lo[d];
    frame[d] = lo[d];
    frame[3 + d] =
        std::min(extent > 0 ? static_cast<double>(dims[d]) / extent : 1.0 / cutoff, 1.0 / cutoff) * (1.0 - 1e-9);
  }
}

/// reach[h]: the atoms within h message-passing hops of the `centres` (bool, per atom; reach[0]:
/// the centres), h = 0 .. hops, found by the grid's kernels on its device; `cell`: each atom's cell
/// (kernels::GraphCellOf). No value is read back: a CUDA graph records it.
std::vector<torch::Tensor> reach(const kernels::CellGrid<double>& g, const torch::Tensor& cell, const torch::Tensor& centres,
                                 int hops);

}  // namespace mlip::detail
