// Layer-by-layer evaluation with ghost feature exchange (mlip/model/message_passing.h).
//
// Forward: the ghosts' input features of layer k+1 come from their owners' outputs of layer k
// (exchange.forward). Backward, from the readout down: a layer's output gradient gives its input
// gradients; the ghosts' go back to their owners (exchange.reverse) and are added to the owned
// nodes' gradient, which is the output gradient of the layer below. Each layer's backward stops
// at its own inputs (leaves) and at the edge vectors, whose gradient is summed over the layers
// and the readout (e.g. a pair repulsion).
//
// Chunks: the owned nodes are taken `chunk` at a time, each with its edges and the nodes they
// reach (renumbered, centres first). With one chunk the forward keeps each layer's autograd
// graph for the backward. With several, the forward evaluates a layer's node terms
// (mp_node_<k>, e.g. the senders' networks) once for all nodes, gathers them into each chunk
// and keeps only the layers' node features (not the first layer's: the embedding is evaluated
// again); the backward evaluates each chunk's layer again, its node terms included (for the
// chunk's nodes, in the chunk's autograd graph), so that besides a layer's inputs and their
// gradients, memory is bounded by the chunk.
//
// Threads: on the CPU with several LibTorch threads, the chunks of a layer run side by side, one
// per thread, each chunk's operations on its thread (for_chunks): a chunk's many small operations
// (a few thousand edges, below aten's grain) would otherwise each run on one thread while the
// others wait. The backward adds the chunks' gradients in chunk order, so a run is deterministic
// for a given number of threads. Memory then holds one chunk's graph per thread.
#include "mlip/model/message_passing.h"

#include <algorithm>
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include "mlip/error.h"
#include "model_internal.h"

namespace mlip {
namespace {

using Tensors = std::vector<torch::Tensor>;
using Args = std::vector<torch::jit::IValue>;

std::string layer_method(int k) { return "mp_layer_" + std::to_string(k); }
std::string node_method(int k) { return "mp_node_" + std::to_string(k); }

// A method's tensor or tuple of tensors.
Tensors tensors_of(const torch::jit::IValue& v) {
  if (v.isTensor()) return {v.toTensor()};
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

// Features of a node set as one (n, D) CPU matrix in their dtype, and back into the model's shapes.
torch::Tensor flatten(const Tensors& features) {
  Tensors cols;
  for (const auto& t : features) cols.push_back(t.reshape({t.size(0), row_width(t)}));
  return torch::cat(cols, 1).to(torch::kCPU).contiguous();
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

Tensors concat(const std::vector<Tensors>& parts) {
  Tensors out;
  for (std::size_t i = 0; i < parts.front().size(); ++i) {
    Tensors column;
    for (const auto& p : parts) column.push_back(p[i]);
    out.push_back(torch::cat(column, 0));
  }
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
Tensors grad(const Tensors& outputs, const Tensors& seeds, const Tensors& inputs) {
  Tensors outs, gs;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].requires_grad()) {
      outs.push_back(outputs[i]);
      gs.push_back(seeds[i]);
    }
  if (outs.empty()) return zeros_or(Tensors(inputs.size()), inputs);
  return zeros_or(torch::autograd::grad(outs, inputs, gs, false, false, /*allow_unused=*/true), inputs);
}

// The centres [first, first + count) of a graph with their edges and the nodes those reach,
// renumbered with the centres first. `whole`: the graph itself (one chunk, no renumbering).
struct Chunk {
  int64_t first = 0, count = 0;
  bool whole = false;
  torch::Tensor edges, nodes;        // graph edges and graph nodes of the chunk (unless whole)
  torch::Tensor center, neighbor;    // the chunk's edges in its own numbering

  Tensors gather(const Tensors& node_features) const {
    if (whole) return node_features;
    Tensors out;
    for (const auto& t : node_features) out.push_back(t.index_select(0, nodes));
    return out;
  }
  torch::Tensor edge_rows(const torch::Tensor& t) const { return whole ? t : t.index_select(0, edges); }
};

// Chunks of centres ending at `ends`; one whole chunk when there is one (also for no centres, so
// that every rank runs the same layers and exchanges).
std::vector<Chunk> make_chunks(const torch::Tensor& edge_index, int64_t n_owned, int64_t n_nodes,
                               const std::vector<int64_t>& ends, const torch::Device& device) {
  if (ends.size() <= 1) {
    Chunk c;
    c.count = n_owned;
    c.whole = true;
    c.center = edge_index[0].to(device);
    c.neighbor = edge_index[1].to(device);
    return {c};
  }
  const torch::Tensor ei = edge_index.to(torch::kCPU).contiguous();
  const int64_t n_edges = ei.size(1);
  const int64_t* center = ei.data_ptr<int64_t>();
  const int64_t* neighbor = center + n_edges;
  std::vector<int64_t> start(n_owned + 1, 0), order(n_edges);    // edges sorted by centre
  for (int64_t e = 0; e < n_edges; ++e) ++start[center[e] + 1];
  for (int64_t i = 0; i < n_owned; ++i) start[i + 1] += start[i];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t e = 0; e < n_edges; ++e) order[fill[center[e]]++] = e;

  std::vector<Chunk> chunks;
  std::vector<int64_t> local(n_nodes, -1);
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  for (std::size_t k = 0; k < ends.size(); ++k) {
    Chunk c;
    c.first = k == 0 ? 0 : ends[k - 1];
    c.count = ends[k] - c.first;
    const int64_t first = c.first;
    std::vector<int64_t> nodes, edges(order.begin() + start[first], order.begin() + start[first + c.count]);
    for (int64_t i = 0; i < c.count; ++i) nodes.push_back(first + i), local[first + i] = i;
    std::vector<int64_t> cl(edges.size()), nl(edges.size());
    for (std::size_t e = 0; e < edges.size(); ++e) {
      const int64_t j = neighbor[edges[e]];
      if (local[j] < 0) local[j] = static_cast<int64_t>(nodes.size()), nodes.push_back(j);
      cl[e] = center[edges[e]] - first;
      nl[e] = local[j];
    }
    for (const int64_t j : nodes) local[j] = -1;
    auto tensor = [&](const std::vector<int64_t>& v) {
      return torch::tensor(v, i64).to(device);
    };
    c.edges = tensor(edges), c.nodes = tensor(nodes), c.center = tensor(cl), c.neighbor = tensor(nl);
    chunks.push_back(std::move(c));
  }
  return chunks;
}

// The model's parts, with interpreter errors reported as mlip::Error.
struct Parts {
  torch::jit::Module& module;

  torch::jit::IValue call(const std::string& method, Args args) const {
    try {
      return module.get_method(method)(std::move(args));
    } catch (const c10::Error&) {
      throw;
    } catch (const std::exception& e) {
      throw Error("inside the model (" + method + "): " + detail::interpreter_error(e.what()));
    }
  }

  // Layer k's node terms (e.g. the networks of the senders' features), for any node set.
  Tensors node(int k, const Tensors& x) const { return tensors_of(call(node_method(k), Args(x.begin(), x.end()))); }

  // Layer k's outputs for a chunk's centres from its nodes' inputs `x` and node terms `terms`
  // and its edges' vectors.
  Tensors layer(int k, const Tensors& x, const Tensors& terms, const Chunk& c, const torch::Tensor& vectors) const {
    const Tensors radial = tensors_of(call("mp_edges", {vectors}));
    Args args(x.begin(), x.end());
    args.insert(args.end(), terms.begin(), terms.end());
    args.insert(args.end(), {c.center, c.neighbor});
    args.insert(args.end(), radial.begin(), radial.end());
    args.emplace_back(c.count);
    return tensors_of(call(layer_method(k), std::move(args)));
  }
};

// What a chunk's layer needs for its backward: its inputs (leaves), node terms, edge vectors
// (a leaf) and outputs.
struct LayerRun {
  Tensors x, terms;
  torch::Tensor vectors;
  Tensors out;
};

// Layer k on a chunk, its node terms computed from the chunk's inputs in the same autograd graph
// (no gradient reaches the first layer's inputs: the embedding has none).
LayerRun run_layer(const Parts& parts, int k, const Tensors& x_all, const Chunk& c, const torch::Tensor& vectors_all) {
  LayerRun r;
  r.x = leaves(c.gather(x_all));
  if (k > 0) {
    r.terms = parts.node(k, r.x);
  } else {
    torch::NoGradGuard no_grad;
    r.terms = parts.node(k, r.x);
  }
  r.vectors = c.edge_rows(vectors_all).detach().requires_grad_(true);
  r.out = parts.layer(k, r.x, r.terms, c, r.vectors);
  return r;
}

// f(i) for the chunks i in [first, last): on the CPU with several LibTorch threads side by side,
// one chunk per thread at a time, each with the caller's thread-local state (grad mode, the graph
// executor's optimisation); else in order. f must write only what belongs to chunk i.
template <class F> void for_chunks(int64_t first, int64_t last, const torch::Device& device, F&& f) {
  if (!device.is_cpu() || last - first < 2 || at::get_num_threads() < 2 || at::in_parallel_region()) {
    for (int64_t i = first; i < last; ++i) f(i);
    return;
  }
  const at::ThreadLocalState state;
  const bool optimize = torch::jit::getGraphExecutorOptimize();
  at::parallel_for(first, last, 1, [&](int64_t a, int64_t b) {
    const at::ThreadLocalStateGuard same_state(state);
    const torch::jit::GraphOptimizerEnabledGuard same_optimize(optimize);
    for (int64_t i = a; i < b; ++i) f(i);
  });
}

// Layer k's gradients from a chunk's run, with respect to its edge vectors and (but in the first
// layer) its inputs; frees the run's graph.
Tensors layer_grads(LayerRun& run, int k, const Chunk& c, const Tensors& seed) {
  Tensors wrt{run.vectors};
  if (k > 0) wrt.insert(wrt.end(), run.x.begin(), run.x.end());
  Tensors g = grad(run.out, rows(seed, c.first, c.count), wrt);
  run = LayerRun();
  return g;
}

// Adds a chunk's layer_grads to edge_grad and (not for the first layer) input_grad.
void add_grads(const Tensors& g, const Chunk& c, torch::Tensor& edge_grad, Tensors& input_grad) {
  if (c.whole) {
    edge_grad += g[0];
    input_grad.assign(g.begin() + 1, g.end());
    return;
  }
  edge_grad.index_add_(0, c.edges, g[0]);
  for (std::size_t i = 1; i < g.size(); ++i) input_grad[i - 1].index_add_(0, c.nodes, g[i]);
}

// Layer k's backward, each chunk's layer evaluated again: as many chunks at a time as there are
// threads, their gradients added in chunk order.
Tensors backward_chunks(const Parts& parts, int k, const Tensors& inputs, const std::vector<Chunk>& chunks,
                        const torch::Tensor& vectors, const Tensors& seed, torch::Tensor& edge_grad) {
  Tensors input_grad;
  for (const auto& feature : inputs)
    if (k > 0) input_grad.push_back(torch::zeros_like(feature));
  const auto n = int64_t(chunks.size()), wave = std::max<int64_t>(1, at::get_num_threads());
  for (int64_t first = 0; first < n; first += wave) {
    const int64_t last = std::min(n, first + wave);
    std::vector<Tensors> g(std::size_t(last - first));
    for_chunks(first, last, vectors.device(), [&](int64_t i) {
      LayerRun r = run_layer(parts, k, inputs, chunks[std::size_t(i)], vectors);
      g[std::size_t(i - first)] = layer_grads(r, k, chunks[std::size_t(i)], seed);
    });
    for (int64_t i = first; i < last; ++i) add_grads(g[std::size_t(i - first)], chunks[std::size_t(i)], edge_grad, input_grad);
  }
  return input_grad;
}

}  // namespace

int exchange_layers(const Model& model) {
  torch::jit::Module& m = model.module();
  for (const char* part : {"mp_edges", "mp_embed", "mp_readout"})
    if (!m.find_method(part)) return 0;
  int layers = 0;
  while (m.find_method(layer_method(layers)) && m.find_method(node_method(layers))) ++layers;
  return layers == model.info().message_passing_layers ? layers : 0;
}

int64_t exchange_feature_width(const Model& model) {
  const torch::Tensor none = torch::empty({0}, torch::TensorOptions().dtype(torch::kInt64).device(model.device()));
  int64_t width = 0;
  for (const auto& t : tensors_of(model.module().get_method("mp_embed")({none}))) width += row_width(t);
  return width;
}

ModelOutput evaluate_exchanging(const Model& model, const GraphView& graph, const FeatureExchange& exchange,
                                int64_t chunk) {
  std::vector<int64_t> ends;
  for (int64_t end = chunk; chunk > 0 && end < graph.n_centers; end += chunk) ends.push_back(end);
  ends.push_back(graph.n_centers);
  return evaluate_exchanging(model, graph, exchange, ends);
}

ModelOutput evaluate_exchanging(const Model& model, const GraphView& graph, const FeatureExchange& exchange,
                                const std::vector<int64_t>& chunk_end) {
  if (chunk_end.empty() || chunk_end.back() != graph.n_centers)
    throw Error("evaluate_exchanging: the chunks must end at the graph's last centre");
  const int layers = exchange_layers(model);
  if (layers == 0) throw Error("model: its file does not define the per-layer parts (mp_*) of ghost exchange");
  const Parts parts{model.module()};
  const detail::GraphTensors t(graph);
  const torch::Tensor species = t.species.to(model.device());
  const torch::Tensor edge_index = t.edge_index.to(model.device());
  const torch::Tensor vectors = t.edge_vectors.to(model.device(), model.info().torch_dtype());
  const int64_t n_owned = graph.n_centers, n_ghost = graph.n_nodes - graph.n_centers;
  const std::vector<Chunk> chunks = make_chunks(t.edge_index, n_owned, graph.n_nodes, chunk_end, model.device());
  const bool keep = chunks.size() == 1;    // else the backward evaluates each chunk's layer again
  torch::jit::GraphOptimizerEnabledGuard optimize(detail::optimize_graphs_on(model.device()));

  // Forward: every layer's inputs at all nodes (and, for one chunk, the layer's autograd graph).
  std::vector<Tensors> inputs(layers);
  std::vector<LayerRun> kept(layers);
  Tensors owned;
  for (int k = 0; k < layers; ++k) {
    if (k == 0) {
      inputs[0] = tensors_of(parts.call("mp_embed", {species}));
    } else {
      const Tensors ghosts = unflatten(exchange.forward(flatten(owned)), owned);
      inputs[k] = concat({owned, ghosts});
    }
    std::vector<Tensors> outs;
    if (keep) {
      kept[k] = run_layer(parts, k, inputs[k], chunks[0], vectors);
      outs.push_back(kept[k].out);
    } else {
      torch::NoGradGuard no_grad;
      const Tensors terms = parts.node(k, inputs[k]);
      outs.resize(chunks.size());
      for_chunks(0, int64_t(chunks.size()), vectors.device(), [&](int64_t i) {
        const Chunk& c = chunks[std::size_t(i)];
        outs[std::size_t(i)] = parts.layer(k, c.gather(inputs[k]), c.gather(terms), c, c.edge_rows(vectors));
      });
    }
    owned = concat(outs);
    for (auto& x : owned) x = x.detach();
    if (!keep && k == 0) inputs[0].clear();    // the embedding: evaluated again in the backward
  }
  const Tensors last = leaves(owned);
  const torch::Tensor vectors_leaf = vectors.detach().requires_grad_(true);
  ModelOutput out;
  out.atom_energy = model.head() < 0  // the file's head, or the one selected (Model::select_head)
                        ? parts.call("mp_readout", {species, last[0], edge_index, vectors_leaf, n_owned}).toTensor()
                        : parts.call("mp_readout_heads", {species, last[0], edge_index, vectors_leaf, n_owned,
                                                          torch::full_like(species, model.head())})
                              .toTensor();

  // Backward, layer by layer from the readout down.
  const torch::Tensor total = out.atom_energy.sum();
  const Tensors readout_grads = grad({total}, {torch::ones_like(total)}, {last[0], vectors_leaf});
  Tensors seed = zeros_or(Tensors(last.size()), last);
  seed[0] = readout_grads[0];
  torch::Tensor edge_grad = readout_grads[1].clone();
  for (int k = layers - 1; k >= 0; --k) {
    if (inputs[k].empty()) inputs[k] = tensors_of(parts.call("mp_embed", {species}));
    Tensors input_grad;
    if (keep)
      add_grads(layer_grads(kept[k], k, chunks[0], seed), chunks[0], edge_grad, input_grad);
    else
      input_grad = backward_chunks(parts, k, inputs[k], chunks, vectors, seed, edge_grad);
    inputs[k].clear();
    if (k == 0) break;
    const Tensors back = unflatten(exchange.reverse(flatten(rows(input_grad, n_owned, n_ghost))), owned);
    for (std::size_t i = 0; i < seed.size(); ++i) seed[i] = input_grad[i].narrow(0, 0, n_owned) + back[i];
  }
  out.atom_energy = out.atom_energy.detach().to(graph.device, torch::kFloat64).contiguous();
  out.edge_grad = edge_grad.to(graph.device, torch::kFloat64).contiguous();
  return out;
}

}  // namespace mlip
