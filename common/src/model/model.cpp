#include "mlip/model/model.h"
#include "model_internal.h"
#include "mlip/ops/operators.h"

#include "mlip/model/heads.h"
#include "mlip/model/model_metadata.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/autograd/autograd.h>
#include <zlib.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <sstream>

#include "mlip/graph/chunk_graph.h"
#include "mlip/model/device.h"
#include "mlip/error.h"
#include "mlip/data/file_io.h"

namespace mlip {

namespace detail {

// Whether TorchScript's graph executor optimises a model call on `device`; set around every
// forward() so that every call takes the same path (the optimiser's first calls are unoptimised
// profiling runs). Not on the CPU: there its autodiff subgraphs (which split addmm into mm + add,
// with generated backward graphs) made se_e2_a 1.1x slower than eager autograd, and they change
// the rounding between the first (profiling) calls and later ones, which made a resumed training
// run differ from an uninterrupted one.
// The line of a TorchScript interpreter report that says what failed: the first line that
// starts with an exception name ("RuntimeError: ..."), after the traceback.
std::string interpreter_error(const std::string& what) {
  std::istringstream lines(what);
  for (std::string line; std::getline(lines, line);) {
    const std::size_t colon = line.find("Error: ");
    if (colon == std::string::npos || colon == 0) continue;
    if (std::all_of(line.begin(), line.begin() + static_cast<std::ptrdiff_t>(colon),
                    [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; }))
      return line;
  }
  return what;
}

bool optimize_graphs_on(const torch::Device& device) {
  return device.is_cpu() ? false : torch::jit::getGraphExecutorOptimize();
}

}  // namespace detail

Model::Model(torch::jit::Module module, ModelMetadata metadata, torch::Device device)
    : module_(std::move(module)), device_(device) {
  metadata.grouped_forward = module_.find_method("forward_grouped").has_value();
  metadata_ = std::make_shared<const ModelMetadata>(std::move(metadata));
}

const ModelInfo& Model::info() const { return *metadata_; }

namespace {

constexpr const char* kDigestFile = "mlip/digest.json";

// CRC-32 over the names and bytes of every record of a TorchScript archive, in name order, but
// the digest's own record and PyTorch's per-save serialization id. Returns (crc, records).
std::pair<uint32_t, std::size_t> records_crc32(caffe2::serialize::PyTorchStreamReader& reader) {
  std::vector<std::string> names = reader.getAllRecords();
  std::sort(names.begin(), names.end());
  uLong crc = crc32(0L, Z_NULL, 0);
  std::size_t count = 0;
  auto feed = [&crc](const char* data, std::size_t n) {
    for (std::size_t at = 0; at < n;) {
      const uInt chunk = static_cast<uInt>(std::min<std::size_t>(n - at, 1u << 30));
      crc = crc32(crc, reinterpret_cast<const Bytef*>(data + at), chunk);
      at += chunk;
    }
  };
  for (const std::string& name : names) {
    if (name == std::string("extra/") + kDigestFile || name == ".data/serialization_id") continue;
    feed(name.c_str(), name.size() + 1);
    auto [data, size] = reader.getRecord(name);
    feed(static_cast<const char*>(data.get()), size);
    ++count;
  }
  return {static_cast<uint32_t>(crc), count};
}

nlohmann::json digest_json(const std::pair<uint32_t, std::size_t>& d) {
  return {{"algorithm", "crc32 of record names and bytes"}, {"crc32", d.first}, {"records", d.second}};
}

// "" when the file's records match `digest_text`; else why not.
std::string check_digest(const std::string& path, const std::string& digest_text) {
  nlohmann::json expected;
  try {
    expected = nlohmann::json::parse(digest_text);
    caffe2::serialize::PyTorchStreamReader reader(path);
    const nlohmann::json actual = digest_json(records_crc32(reader));
    if (actual["crc32"] != expected.at("crc32") || actual["records"] != expected.at("records")) {
      return "its records do not match the digest saved with it (CRC-32 " + actual["crc32"].dump() + " over " +
             actual["records"].dump() + " records, saved " + expected.at("crc32").dump() + " over " +
             expected.at("records").dump() + "): bytes were altered after it was written";
    }
  } catch (const nlohmann::json::exception& e) {
    return std::string(kDigestFile) + " is damaged: " + e.what();
  } catch (const c10::Error& e) {
    return std::string("its records cannot be read: ") + e.what_without_backtrace();
  }
  return "";
}

}  // namespace

Model Model::load(const std::string& path, const torch::Device& device) {
  link_operators();   // models call torch.ops.mlip
  if (std::filesystem::is_directory(path)) {
    const bool checkpoint = std::filesystem::exists(std::filesystem::path(path) / "state.json");
    throw Error(path + ": is a directory, not a model file" +
                (checkpoint ? std::string(" (a checkpoint folder: export it with mlip-trainer export ") + path +
                                  " -o model.pt)"
                            : std::string()));
  }
  if (!std::filesystem::is_regular_file(path)) throw Error(path + ": model file not found");
  if (device.is_cpu()) note_model_loaded_on_cpu();
  torch::jit::ExtraFilesMap extra{{ModelMetadata::kExtraFile, ""}, {kDigestFile, ""}};
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, device, extra);
  } catch (const c10::Error& e) {
    throw Error(path + ": not a readable TorchScript model (truncated or corrupted?): " +
                e.what_without_backtrace());
  } catch (const std::exception& e) {  // e.g. torch::jit::ErrorReport from damaged code records
    std::string what = e.what();
    what = what.substr(0, what.find('\n'));
    throw Error(path + ": not a readable TorchScript model (truncated or corrupted?): " + what);
  }
  const std::string& text = extra[ModelMetadata::kExtraFile];
  if (text.empty()) {
    throw Error(path + ": no " + std::string(ModelMetadata::kExtraFile) +
                " inside; was it exported by mlip-trainer?");
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": metadata is not valid JSON: " + e.what());
  }
  ModelMetadata meta = ModelMetadata::from_json(j, path);
  if (!extra[kDigestFile].empty()) {
    const std::string why = check_digest(path, extra[kDigestFile]);
    if (!why.empty()) throw Error(path + ": " + why);
    meta.digest_checked = true;
  }
  if (!module.find_method("forward")) throw Error(path + ": the module has no forward()");
  module.eval();
  // Inference: no weight keeps gradient history (the operators then save only what the edge
  // vectors' gradients need; tanh_net, for one, kept every layer's activations per edge).
  for (auto p : module.parameters(/*recurse=*/true)) p.requires_grad_(false);
  return Model(std::move(module), std::move(meta), device);
}

ModelOutput evaluate_module(torch::jit::Module& module, const ModelInput& in, EdgeGradient gradient) {
  const bool need_grad = gradient != EdgeGradient::none;
  torch::Tensor vectors = in.edge_vectors;
  if (need_grad) vectors = vectors.detach().requires_grad_(true);
  std::vector<torch::jit::IValue> args{in.species, in.edge_index, vectors, in.n_centers};
  const bool grouped = !in.center_groups.empty(), heads = in.node_head.defined();
  if (grouped) {
    args.emplace_back(in.center_groups);
    args.emplace_back(in.edge_groups);
  }
  if (in.without_prior && (!grouped || heads))
    throw Error("a call without the model's prior is a grouped call of one head (an internal error)");
  const char* method = grouped ? (heads ? "forward_grouped_heads" : in.without_prior ? "forward_grouped_learned" : "forward_grouped")
                       : heads ? "forward_heads"
                               : "forward";
  if (heads) {
    if (!module.find_method("forward_heads")) throw Error("the data names heads, but the model has one output (no heads)");
    // (an earlier version's multi-head file without forward_grouped_heads: refused by GraphCapture)
    args.emplace_back(in.node_head);
  }
  ModelOutput out;
  {
    // Not for grouped calls: they are recorded as CUDA graphs, and the executor's profiling
    // runs and fusers' kernel compilation must not fall into a recording.
    torch::jit::GraphOptimizerEnabledGuard optimize(!grouped && detail::optimize_graphs_on(vectors.device()));
    try {
      out.atom_energy = module.get_method(method)(args).toTensor();
    } catch (const c10::Error&) {
      throw;
    } catch (const std::exception& e) {   // the interpreter's report of an error inside the model
      throw Error("inside the model: " + detail::interpreter_error(e.what()));
    }
  }
  if (out.atom_energy.dim() != 1 || out.atom_energy.size(0) != in.n_centers) {
    throw Error("model returned energies of shape " + c10::str(out.atom_energy.sizes()) + ", expected (" +
                std::to_string(in.n_centers) + ")");
  }
  if (!need_grad) return out;
  const bool keep = gradient == EdgeGradient::differentiable;
  const torch::Tensor total = out.atom_energy.sum();
  if (total.requires_grad()) {
    out.edge_grad = torch::autograd::grad({total}, {vectors}, {}, /*retain_graph=*/keep,
                                          /*create_graph=*/keep, /*allow_unused=*/true)[0];
  }
  if (!out.edge_grad.defined()) out.edge_grad = torch::zeros_like(vectors);  // no edges used
  if (!keep) out.atom_energy = out.atom_energy.detach();
  return out;
}

ModelOutput Model::evaluate(const ModelInput& in, bool need_grad) const {
  const EdgeGradient gradient = need_grad ? EdgeGradient::value : EdgeGradient::none;
  if (head_ < 0 || in.node_head.defined()) return evaluate_module(module_, in, gradient);
  ModelInput with_head = in;
  with_head.node_head = torch::full({in.species.size(0)}, head_, in.species.options());
  return evaluate_module(module_, with_head, gradient);
}

void Model::select_head(const std::string& name) {
  const std::vector<std::string> heads = model_heads(metadata_->hyperparameters);
  if (heads.empty() || !module_.find_method("forward_heads"))
    throw Error("head " + name + ": the model has no heads (one output)");
  head_ = find_head(heads, name);
  if (head_ < 0) throw Error("head " + name + " is not one of the model's heads (" + head_list(heads) + ")");
}


ModelInput detail::model_input(const Model& model, const GraphView& g) {
  const GraphTensors t(g);
  ModelInput in;
  in.species = t.species.to(model.device());
  in.edge_index = t.edge_index.to(model.device());
  in.edge_vectors = t.edge_vectors.to(model.device(), model.info().torch_dtype());
  in.n_centers = g.n_centers;
  return in;
}

ModelOutput evaluate_graph(const Model& model, const GraphView& g, bool need_grad) {
  ModelOutput out = model.evaluate(detail::model_input(model, g), need_grad);
  out.atom_energy = out.atom_energy.to(g.device, torch::kFloat64).contiguous();
  if (out.edge_grad.defined()) out.edge_grad = out.edge_grad.to(g.device, torch::kFloat64).contiguous();
  return out;
}

GraphView graph_view(const ChunkGraph& graph) {
  GraphView view;
  view.species = graph.species.data();
  view.n_nodes = static_cast<int64_t>(graph.species.size());
  view.edge_index = graph.edge_index.data();
  view.edge_index_stride = graph.n_edges;
  view.edge_vectors = graph.edge_vectors.data();
  view.n_edges = graph.n_edges;
  view.n_centers = graph.n_centers;
  return view;
}

ModelOutput evaluate_chunk(const Model& model, ChunkGraph& graph, bool need_grad) {
  return evaluate_graph(model, graph_view(graph), need_grad);
}

EdgeForces edge_forces(const GraphView& graph, const torch::Tensor& edge_grad, const EdgeForceRequest& request) {
  const detail::GraphTensors t(graph);
  EdgeForces out = edge_forces(t.edge_index, t.edge_vectors, edge_grad.to(torch::kFloat64), graph.n_nodes, request);
  for (torch::Tensor* r : {&out.forces, &out.virial, &out.node_virial})
    if (r->defined()) *r = r->contiguous();
  return out;
}

void save_model(torch::jit::Module& module, const ModelMetadata& metadata, const std::string& path,
                const torch::jit::ExtraFilesMap& more) {
  const std::string tmp = path + ".tmp";
  torch::jit::ExtraFilesMap extra = more;
  extra[ModelMetadata::kExtraFile] = metadata.to_json().dump(2);
  std::string bytes;
  try {
    // The digest covers every record but itself, so it is taken from a first save in memory;
    // the second save, with it, has the same records (read back and checked below). Both in
    // memory: LibTorch's file writer reports a failed write (a full disk) from its destructor.
    std::ostringstream first(std::ios::binary);
    module.save(first, extra);
    std::istringstream in(first.str(), std::ios::binary);
    caffe2::serialize::PyTorchStreamReader reader(&in);
    extra[kDigestFile] = digest_json(records_crc32(reader)).dump();
    std::ostringstream second(std::ios::binary);
    module.save(second, extra);
    bytes = second.str();
  } catch (const c10::Error& e) {
    throw Error(path + ": cannot write model: " + e.what_without_backtrace());
  }
  try {
    write_file(tmp, bytes);
  } catch (const Error& e) {
    std::remove(tmp.c_str());
    throw Error(path + ": cannot write model (" + e.what() + "); " +
                (std::filesystem::exists(path) ? "the file there is left as it was" : "nothing was written"));
  }
  if (const std::string why = check_digest(tmp, extra[kDigestFile]); !why.empty()) {
    std::remove(tmp.c_str());
    throw Error(path + ": the model written (" + tmp + ") does not read back as saved: " + why);
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw Error(path + ": cannot move model into place: " + ec.message());
}

EdgeForces edge_forces(const torch::Tensor& edge_index, const torch::Tensor& edge_vectors,
                       const torch::Tensor& edge_grad, int64_t n_nodes, const EdgeForceRequest& request) {
  EdgeForces out;
  // Out of place, so that a training step can differentiate through it.
  out.forces = torch::zeros({n_nodes, 3}, edge_grad.options())
                   .index_add(0, edge_index[0], edge_grad)
                   .index_add(0, edge_index[1], -edge_grad);
  if (!request.virial && !request.node_virial) return out;
  const torch::Tensor r = edge_vectors.to(edge_grad.scalar_type());
  if (request.virial && !request.edge_group.defined() && !request.node_virial) {
    out.virial = -torch::mm(r.t(), edge_grad).reshape({1, 9});   // one group: no (n_edges, 9) buffer
    return out;
  }
  const torch::Tensor w = -(r.unsqueeze(2) * edge_grad.unsqueeze(1)).reshape({-1, 9});
  if (request.virial) {
    out.virial = request.edge_group.defined()
                     ? torch::zeros({request.n_groups, 9}, w.options()).index_add(0, request.edge_group, w)
                     : w.sum(0, /*keepdim=*/true);
  }
  if (request.node_virial) out.node_virial = torch::zeros({n_nodes, 9}, w.options()).index_add(0, edge_index[1], w);
  return out;
}

}  // namespace mlip
