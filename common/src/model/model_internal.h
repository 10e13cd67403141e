// What model.cpp shares with the other evaluation paths of common/ (message_passing.cpp); not
// installed.
#pragma once

#include <string>

#include <ATen/ops/from_blob.h>

#include "mlip/model/model.h"

namespace mlip::detail {

/// The line of a TorchScript interpreter report that says what failed.
std::string interpreter_error(const std::string& what);

/// Whether TorchScript's graph executor optimises a model call on `device` (model.cpp says why).
bool optimize_graphs_on(const torch::Device& device);

// The graph's arrays as tensors on its device, without a copy. from_blob wants non-const
// pointers; the tensors are only read (evaluate_module detaches the vectors before asking for
// their gradient, which does not write them). The device is the view's, not asked of CUDA: an
// empty array's pointer may be null (a graph of no edges), which CUDA's pointer lookup refuses.
struct GraphTensors {
  torch::Tensor species, edge_index, edge_vectors;
  explicit GraphTensors(const GraphView& g) {
    const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(g.device);
    species = wrap(g.species, {g.n_nodes}, {1}, i64, g.device);
    edge_index = wrap(g.edge_index, {2, g.n_edges}, {g.edge_index_stride, 1}, i64, g.device);
    edge_vectors = wrap(g.edge_vectors, {g.n_edges, 3}, {3, 1}, i64.dtype(torch::kFloat64), g.device);
  }
  template <class T>
  static torch::Tensor wrap(const T* data, at::IntArrayRef sizes, at::IntArrayRef strides, const torch::TensorOptions& options,
                            const torch::Device& device) {
    at::TensorMaker maker = at::for_blob(const_cast<T*>(data), sizes);
    maker.strides(strides).options(options);
    if (device.is_cpu() || device.has_index()) maker.target_device(device);   // else ask where it lives
    return maker.make_tensor();
  }
};

/// A graph's arrays as a model's input: on the model's device, the vectors in its dtype.
ModelInput model_input(const Model& model, const GraphView& g);

}  // namespace mlip::detail
