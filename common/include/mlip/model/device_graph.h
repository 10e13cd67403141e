// The neighbour graph built where the model runs: positions go to the device once, and the cell
// list, the halo of message-passing models and the edge list in the model's layout are made
// there (the device kernels of src/ops/graph_elements.h; on the CPU the same functors in a loop,
// which ctest checks against ChunkGraph). Nothing of the size of the edges crosses to the host.
//
// The graph is ChunkGraph's for a range of centres (those the model takes): centres are
// nodes [0, n_centers) in atom order, then the other atoms within `hops` hops of a centre; the
// atoms within hops - 1 send messages along all their edges (their neighbourhoods must be
// complete: LAMMPS's ghost shell). Edges come by centre atom, each centre's in a fixed order.
#pragma once

#include <cstdint>
#include <memory>

#include <torch/types.h>

#include "mlip/model/model.h"

namespace mlip {

struct DeviceGraph {
  torch::Tensor species;        // (n_nodes) int64
  torch::Tensor edge_index;     // (2, n_edges) int64, contiguous
  torch::Tensor edge_vectors;   // (n_edges, 3) float64, Å
  torch::Tensor node_atom;      // (n_nodes) int64: the atom of each node
  int64_t n_centers = 0;

  int64_t n_nodes() const { return node_atom.numel(); }
  int64_t n_edges() const { return edge_vectors.size(0); }
  /// The graph as evaluate_graph() takes it (valid while this graph lives).
  GraphView view() const;
};

/// The cell list of one set of positions, from which the graphs of any range of centres are built
/// (a step's atoms in several calls bin them once).
class DeviceGraphBuilder {
 public:
  /// `positions`: (n, 3) float64 on the device the graphs are built on; `species`: (n) int64 model
  /// species, -1 for atoms the model skips, same device; edges strictly within `cutoff`.
  DeviceGraphBuilder(const torch::Tensor& positions, const torch::Tensor& species, double cutoff);
  ~DeviceGraphBuilder();
  DeviceGraphBuilder(const DeviceGraphBuilder&) = delete;
  DeviceGraphBuilder& operator=(const DeviceGraphBuilder&) = delete;

  /// The graph whose centres are the atoms [first, last) the model takes; `hops`: the model's
  /// message-passing depth (1 for local models).
  DeviceGraph build(int64_t first, int64_t last, int hops) const;

  struct Cells;   // the cell list (device_graph.cpp)

 private:
  torch::Tensor x_, species_;
  std::unique_ptr<Cells> cells_;   // none without atoms
};

/// DeviceGraphBuilder(positions, species, cutoff).build(0, n_local, hops).
DeviceGraph build_device_graph(const torch::Tensor& positions, const torch::Tensor& species, int64_t n_local,
                               double cutoff, int hops);

}  // namespace mlip
