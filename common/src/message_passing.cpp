// Layer-by-layer evaluation with ghost feature exchange (mlip/message_passing.h).
//
// Forward: the ghosts' input features of layer k+1 come from their owners' outputs of layer k
// (exchange.forward). Each layer's inputs are made leaves (detached, requiring grad), as are the
// edges' radial terms, so that one layer's backward stops at its own inputs. Backward, from the
// readout down: a layer's output gradient gives its input gradients; the ghosts' go back to their
// owners (exchange.reverse) and are added to the owned nodes' gradient, which is the output
// gradient of the layer below. The radial terms' gradients are summed over layers and taken
// through mp_edges once, at the end, with the readout's direct dependence on the edge vectors
// (e.g. a pair repulsion) added.
#include "mlip/message_passing.h"

#include <string>
#include <vector>

#include <torch/csrc/autograd/autograd.h>

#include "mlip/error.h"
#include "model_internal.h"

namespace mlip {
namespace {

using Tensors = std::vector<torch::Tensor>;

std::string layer_method(int k) { return "mp_layer_" + std::to_string(k); }

Tensors tensors_of(const torch::jit::IValue& v) {
  Tensors out;
  for (const auto& e : v.toTupleRef().elements()) out.push_back(e.toTensor());
  return out;
}

Tensors leaves(const Tensors& ts) {
  Tensors out;
  for (const auto& t : ts) out.push_back(t.detach().requires_grad_(true));
  return out;
}

// Values per node of a feature tensor (all axes but the first).
int64_t row_width(const torch::Tensor& t) {
  int64_t w = 1;
  for (int64_t d = 1; d < t.dim(); ++d) w *= t.size(d);
  return w;
}

// Features of a node set as one (n, D) float64 CPU matrix, and back into the model's shapes.
torch::Tensor flatten(const Tensors& features) {
  Tensors cols;
  for (const auto& t : features) cols.push_back(t.reshape({t.size(0), row_width(t)}));
  return torch::cat(cols, 1).to(torch::kCPU, torch::kFloat64).contiguous();
}

Tensors unflatten(const torch::Tensor& flat, const Tensors& like) {
  Tensors out;
  int64_t col = 0;
  for (const auto& t : like) {
    std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
    shape[0] = flat.size(0);
    const int64_t width = row_width(t);
    out.push_back(flat.narrow(1, col, width).reshape(shape).to(t.device(), t.scalar_type()));
    col += width;
  }
  return out;
}

Tensors rows(const Tensors& ts, int64_t first, int64_t count) {
  Tensors out;
  for (const auto& t : ts) out.push_back(t.narrow(0, first, count));
  return out;
}

Tensors concat(const Tensors& a, const Tensors& b) {
  Tensors out;
  for (std::size_t i = 0; i < a.size(); ++i) out.push_back(torch::cat({a[i], b[i]}, 0));
  return out;
}

Tensors zeros_or(const Tensors& grads, const Tensors& like) {
  Tensors out;
  for (std::size_t i = 0; i < like.size(); ++i)
    out.push_back(grads[i].defined() ? grads[i] : torch::zeros_like(like[i]));
  return out;
}

// Gradients of `outputs` (with output gradients `seeds`) with respect to `inputs`; zeros for
// inputs they do not depend on.
Tensors grad(const Tensors& outputs, const Tensors& seeds, const Tensors& inputs, bool retain = false) {
  Tensors outs, gs;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].requires_grad()) {
      outs.push_back(outputs[i]);
      gs.push_back(seeds[i]);
    }
  if (outs.empty()) return zeros_or(Tensors(inputs.size()), inputs);
  return zeros_or(torch::autograd::grad(outs, inputs, gs, retain, false, /*allow_unused=*/true), inputs);
}

}  // namespace

int exchange_layers(const Model& model) {
  torch::jit::Module& m = model.module();
  for (const char* part : {"mp_edges", "mp_embed", "mp_readout"})
    if (!m.find_method(part)) return 0;
  int layers = 0;
  while (m.find_method(layer_method(layers))) ++layers;
  return layers == model.info().message_passing_layers ? layers : 0;
}

int64_t exchange_feature_width(const Model& model) {
  const torch::Tensor none = torch::empty({0}, torch::TensorOptions().dtype(torch::kInt64).device(model.device()));
  int64_t width = 0;
  for (const auto& t : tensors_of(model.module().get_method("mp_embed")({none}))) width += row_width(t);
  return width;
}

ModelOutput evaluate_exchanging(const Model& model, const GraphView& graph, const FeatureExchange& exchange) {
  const int layers = exchange_layers(model);
  if (layers == 0) throw Error("model: its file does not define the per-layer parts (mp_*) of ghost exchange");
  torch::jit::Module& m = model.module();
  const detail::GraphTensors t(graph);
  const torch::Tensor species = t.species.to(model.device());
  const torch::Tensor edge_index = t.edge_index.to(model.device());
  const torch::Tensor center = edge_index[0], neighbor = edge_index[1];
  const torch::Tensor vectors =
      t.edge_vectors.to(model.device(), model.info().torch_dtype()).detach().requires_grad_(true);
  const int64_t n_owned = graph.n_centers, n_ghost = graph.n_nodes - graph.n_centers;
  torch::jit::GraphOptimizerEnabledGuard optimize(detail::optimize_graphs_on(model.device()));
  auto call = [&](const std::string& method, std::vector<torch::jit::IValue> args) {
    try {
      return m.get_method(method)(std::move(args));
    } catch (const c10::Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error("inside the model (" + method + "): " + detail::interpreter_error(e.what()));
    }
  };

  // Forward, keeping each layer's inputs and outputs.
  const Tensors radial = tensors_of(call("mp_edges", {vectors}));
  const Tensors radial_in = leaves(radial);
  std::vector<Tensors> inputs(layers), outputs(layers);
  inputs[0] = tensors_of(call("mp_embed", {species}));
  for (int k = 0; k < layers; ++k) {
    if (k > 0) {
      const Tensors owned = leaves(outputs[k - 1]);
      const Tensors ghosts = leaves(unflatten(exchange.forward(flatten(owned)), owned));
      inputs[k] = concat(owned, ghosts);
    }
    std::vector<torch::jit::IValue> args;
    for (const auto& x : inputs[k]) args.emplace_back(x);
    args.insert(args.end(), {center, neighbor, radial_in[0], radial_in[1], radial_in[2], n_owned});
    outputs[k] = tensors_of(call(layer_method(k), std::move(args)));
  }
  const Tensors last = leaves(outputs[layers - 1]);
  ModelOutput out;
  out.atom_energy = call("mp_readout", {species, last[0], edge_index, vectors, n_owned}).toTensor();

  // Backward, layer by layer from the readout down.
  const torch::Tensor total = out.atom_energy.sum();
  Tensors readout_grads = grad({total}, {torch::ones_like(total)}, {last[0], vectors});
  Tensors seed = zeros_or(Tensors(last.size()), last);
  seed[0] = readout_grads[0];
  Tensors radial_grad = zeros_or(Tensors(3), radial_in);
  for (int k = layers - 1; k >= 0; --k) {
    Tensors wrt = radial_in;
    if (k > 0) wrt.insert(wrt.end(), inputs[k].begin(), inputs[k].end());
    const Tensors g = grad(outputs[k], seed, wrt);
    for (int r = 0; r < 3; ++r) radial_grad[r] = radial_grad[r] + g[r];
    if (k == 0) break;
    const Tensors g_in(g.begin() + 3, g.end());
    const Tensors& like = outputs[k - 1];
    const Tensors back = unflatten(exchange.reverse(flatten(rows(g_in, n_owned, n_ghost))), like);
    seed.clear();
    for (std::size_t i = 0; i < like.size(); ++i) seed.push_back(g_in[i].narrow(0, 0, n_owned) + back[i]);
  }
  // Each layer's inputs are leaves: the ghosts' (leaves(unflatten(...))) are distinct from the
  // owned ones, which are the layer below's outputs detached.
  torch::Tensor edge_grad = grad(radial, radial_grad, {vectors})[0] + readout_grads[1];
  out.atom_energy = out.atom_energy.detach().to(graph.device, torch::kFloat64).contiguous();
  out.edge_grad = edge_grad.to(graph.device, torch::kFloat64).contiguous();
  return out;
}

}  // namespace mlip
