#include "mlip/model/device_graph.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "../ops/device_launch.h"
#include "../ops/graph_elements.h"
#include "cell_grid.h"
#include "mlip/error.h"

namespace mlip {

using kernels::CellGrid;

// The cell list of x: cells at least `cutoff` wide over the atoms' bounding box (wider where that
// would make more than about 8 cells per atom: cell_grid.h), atoms grouped by cell in index order.
struct DeviceGraphBuilder::Cells {
  CellGrid<double> grid{};
  torch::Tensor frame, cell, by_cell, cell_first;   // kept alive for grid's pointers
};

namespace {

// The bounding box of the atoms the model takes (6 numbers on the host: lo, hi; a point at the
// origin when there are none). Throws mlip::Error naming the first such atom whose position is
// not finite (the grid would put it nowhere and drop its edges).
torch::Tensor model_atoms_bounds(const torch::Tensor& x, const torch::Tensor& species) {
  const torch::Tensor taken = (species >= 0).unsqueeze(1);
  const double inf = std::numeric_limits<double>::infinity();
  torch::Tensor bounds = torch::stack({std::get<0>(torch::where(taken, x, inf).min(0)),
                                       std::get<0>(torch::where(taken, x, -inf).max(0))})
                             .cpu();
  const double* b = bounds.data_ptr<double>();
  if (std::all_of(b, b + 6, [](double v) { return std::isfinite(v); })) return bounds;
  const torch::Tensor bad = (taken.squeeze(1) & ~torch::isfinite(x).all(1)).nonzero();
  if (bad.numel() == 0) return torch::zeros({6}, torch::kFloat64);   // no atom the model takes
  throw Error("device graph: atom " + std::to_string(bad[0].item<int64_t>()) + " has a non-finite position");
}

void make_cells(DeviceGraphBuilder::Cells& c, const torch::Tensor& x, const torch::Tensor& species, double cutoff) {
  const int64_t n = x.size(0);
  CellGrid<double>& g = c.grid;
  g.x = x.data_ptr<double>();
  g.species = species.data_ptr<int64_t>();
  g.cut2 = cutoff * cutoff;
  const torch::Tensor bounds = model_atoms_bounds(x, species);
  const double* lo = bounds.data_ptr<double>();
  const std::array<int64_t, 3> dims = detail::grid_dims(lo, lo + 3, cutoff);
  std::copy(dims.begin(), dims.end(), g.dims);
  g.buckets = detail::grid_buckets(g.dims, n);
  torch::Tensor frame = torch::empty({6}, torch::kFloat64);
  detail::grid_frame(lo, lo + 3, g.dims, cutoff, frame.data_ptr<double>());
  c.frame = frame.to(x.device());
  g.frame = c.frame.data_ptr<double>();
  c.cell = torch::empty({n}, species.options());
  detail::run_elements(kernels::GraphCellOf<double>{g, c.cell.data_ptr<int64_t>()}, n, x.device());
  std::tie(c.by_cell, c.cell_first) = detail::grouped_by(c.cell, g.cells() + 1);   // + 1: the skipped atoms
  g.by_cell = c.by_cell.data_ptr<int64_t>();
  g.cell_first = c.cell_first.data_ptr<int64_t>();
}

}  // namespace

std::vector<torch::Tensor> detail::reach(const CellGrid<double>& g, const torch::Tensor& cell,
                                         const torch::Tensor& centres, int hops) {
  std::vector<torch::Tensor> r = {centres};
  for (int h = 1; h <= hops; ++h) {
    const torch::Tensor marked = torch::zeros({g.cells() + 1}, cell.options().dtype(torch::kUInt8))
                                     .scatter_reduce_(0, cell, r.back().to(torch::kUInt8), "amax");
    torch::Tensor next = torch::empty_like(centres);
    run_elements(kernels::GraphReach<double>{g, r.back().data_ptr<bool>(), marked.data_ptr<uint8_t>(),
                                             next.data_ptr<bool>()},
                 centres.numel(), centres.device());
    r.push_back(next);
  }
  return r;
}

GraphView DeviceGraph::view() const {
  GraphView v;
  v.species = species.data_ptr<int64_t>();
  v.n_nodes = n_nodes();
  v.edge_index = edge_index.data_ptr<int64_t>();
  v.edge_index_stride = n_edges();
  v.edge_vectors = edge_vectors.data_ptr<double>();
  v.n_edges = n_edges();
  v.n_centers = n_centers;
  v.device = edge_vectors.device();
  return v;
}

DeviceGraphBuilder::DeviceGraphBuilder(const torch::Tensor& positions, const torch::Tensor& species, double cutoff) {
  TORCH_CHECK(positions.dim() == 2 && positions.size(1) == 3 && positions.scalar_type() == torch::kFloat64,
              "DeviceGraphBuilder: positions must be (n, 3) float64");
  TORCH_CHECK(species.numel() == positions.size(0) && species.scalar_type() == torch::kInt64 &&
                  species.device() == positions.device(),
              "DeviceGraphBuilder: species must be (n) int64 on the positions' device");
  x_ = positions.contiguous();
  species_ = species.contiguous();
  if (x_.size(0) == 0) return;
  cells_ = std::make_unique<Cells>();
  make_cells(*cells_, x_, species_, cutoff);
}

DeviceGraphBuilder::~DeviceGraphBuilder() = default;

DeviceGraph DeviceGraphBuilder::build(int64_t first, int64_t last, int hops) const {
  const int64_t n = x_.size(0);
  const auto index = species_.options();
  DeviceGraph graph;
  if (!cells_) {
    graph.species = graph.node_atom = torch::empty({0}, index);
    graph.edge_index = torch::empty({2, 0}, index);
    graph.edge_vectors = torch::empty({0, 3}, x_.options());
    return graph;
  }
  const torch::Tensor atom = torch::arange(n, index);
  const torch::Tensor centres = (atom >= first) & (atom < last) & (species_ >= 0);
  const CellGrid<double>& grid = cells_->grid;
  const std::vector<torch::Tensor> r = detail::reach(grid, cells_->cell, centres, std::max(hops, 1));
  const torch::Tensor& from = r[r.size() - 2];   // within hops - 1: they send along all their edges
  // Nodes: the centres in atom order, then the other atoms reached.
  graph.node_atom = torch::cat({centres.nonzero().view(-1), (r.back() & ~centres).nonzero().view(-1)});
  graph.n_centers = centres.sum().item<int64_t>();
  const torch::Tensor node_of = torch::full({n}, -1, index).index_put_(
      {graph.node_atom}, torch::arange(graph.node_atom.numel(), index));
  graph.species = species_.index_select(0, graph.node_atom);
  // Edges: counted per atom, then listed from each atom's first slot.
  torch::Tensor count = torch::empty({n}, index);
  detail::run_elements(kernels::GraphCountEdges<double>{grid, from.data_ptr<bool>(), count.data_ptr<int64_t>()}, n,
                       x_.device());
  const torch::Tensor ends = count.cumsum(0);
  const int64_t n_edges = ends[n - 1].item<int64_t>();
  const torch::Tensor starts = ends - count;
  graph.edge_index = torch::empty({2, n_edges}, index);
  graph.edge_vectors = torch::empty({n_edges, 3}, x_.options());
  int64_t* edges = graph.edge_index.data_ptr<int64_t>();
  detail::run_elements(kernels::GraphListEdges<double>{grid, from.data_ptr<bool>(), starts.data_ptr<int64_t>(),
                                                       ends.data_ptr<int64_t>(), node_of.data_ptr<int64_t>(), edges,
                                                       edges + n_edges,
                                                       graph.edge_vectors.data_ptr<double>()},
                       n, x_.device());
  return graph;
}

DeviceGraph build_device_graph(const torch::Tensor& positions, const torch::Tensor& species, int64_t n_local,
                               double cutoff, int hops) {
  return DeviceGraphBuilder(positions, species, cutoff).build(0, n_local, hops);
}

}  // namespace mlip
