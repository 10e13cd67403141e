// Weights from one model into another of the same architecture (fine-tuning), species by species.
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>

#include "mlip/error.h"
#include "mlip/potentials.h"

namespace mlip {

namespace {

// Index of each target species in the source (-1: absent).
std::vector<int64_t> species_in_source(const std::vector<std::string>& target, const std::vector<std::string>& source) {
  std::vector<int64_t> map;
  for (const auto& el : target) {
    const auto it = std::find(source.begin(), source.end(), el);
    map.push_back(it == source.end() ? -1 : static_cast<int64_t>(it - source.begin()));
  }
  return map;
}

std::string shape_text(const torch::Tensor& t) {
  std::string s = "[";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + "]";
}

// Copies `from` into `to` (slices or whole tensors): same shape required.
void copy_checked(torch::Tensor to, const torch::Tensor& from, const std::string& name) {
  if (to.sizes() != from.sizes())
    throw Error("'" + name + "' has shape " + shape_text(from) + " in the source but " + shape_text(to) +
                " here: not the same architecture and hyperparameters");
  to.copy_(from);
}

void transfer_one(torch::Tensor to, const torch::Tensor& from, const std::string& name, SpeciesAxes axes,
                  const std::vector<int64_t>& map, int64_t ns_source) {
  const int64_t ns = static_cast<int64_t>(map.size());
  if (axes == SpeciesAxes::none) return copy_checked(to, from, name);
  const int64_t expected = axes == SpeciesAxes::species_pair ? ns_source * ns_source : ns_source;
  if (from.dim() == 0 || from.size(0) != expected)
    throw Error("'" + name + "' has " + std::to_string(from.dim() ? from.size(0) : 0) + " entries along its species axis in the source, not " +
                std::to_string(expected) + " (" + std::to_string(ns_source) + " species)");
  for (int64_t a = 0; a < ns; ++a) {
    if (map[a] < 0) continue;
    if (axes == SpeciesAxes::species) {
      copy_checked(to[a], from[map[a]], name);
      continue;
    }
    for (int64_t b = 0; b < ns; ++b) {
      if (map[b] < 0) continue;
      if (axes == SpeciesAxes::species_pair)
        copy_checked(to[a * ns + b], from[map[a] * ns_source + map[b]], name);
      else
        copy_checked(to[a][b], from[map[a]][map[b]], name);
    }
  }
}

// A flat parameter with a block per species (SpeciesLayout): the blocks of the species both
// models have, rescaled where the forward normalises by the species count.
void transfer_in_layout(torch::Tensor to, const torch::Tensor& from, const std::string& name, const SpeciesLayout& layout,
                        const std::vector<int64_t>& map, int64_t ns_source) {
  const auto shape_for = [&](int64_t n) {
    std::vector<int64_t> shape = layout.shape;
    shape[layout.axis] = n;
    return shape;
  };
  const std::vector<int64_t> to_shape = shape_for(int64_t(map.size())), from_shape = shape_for(ns_source);
  const int64_t expected = std::accumulate(from_shape.begin(), from_shape.end(), int64_t(1), std::multiplies<>());
  if (from.numel() != expected)
    throw Error("'" + name + "' has " + std::to_string(from.numel()) + " entries in the source, not " + std::to_string(expected) +
                " (" + std::to_string(ns_source) + " species): not the same architecture and hyperparameters");
  const torch::Tensor to_v = to.view(to_shape), from_v = from.reshape(from_shape);
  const double factor = layout.per_sqrt_species ? std::sqrt(double(map.size()) / double(ns_source)) : 1.0;
  for (std::size_t a = 0; a < map.size(); ++a) {
    if (map[a] < 0) continue;
    const torch::Tensor block = from_v.select(layout.axis, map[a]);
    copy_checked(to_v.select(layout.axis, int64_t(a)), factor == 1.0 ? block : block * factor, name);
  }
}

// Index in the source of each target head (-1: the target has no heads and neither has the
// source: nothing to map).
std::vector<int64_t> heads_in_source(const nlohmann::json& target_hp, const nlohmann::json& source_hp) {
  const std::vector<std::string> target = model_heads(target_hp), source = model_heads(source_hp);
  if (target.empty() && !source.empty())
    throw Error("the source model has the heads " + head_list(source) +
                ": list those to keep in model.hyperparameters.heads, or import one head alone");
  std::vector<int64_t> map;
  for (const auto& h : target) {
    const int64_t index = find_head(source, h);
    map.push_back(index >= 0 ? index : (source.empty() ? 0 : default_head(source_hp)));
  }
  return map;
}

// The source's tensor with the target's heads along `axis` (a single-head source's tensor has no
// such axis: its one head serves them all).
torch::Tensor with_target_heads(const torch::Tensor& from, int64_t axis, const std::vector<int64_t>& map,
                                bool source_has_heads) {
  const torch::Tensor t = source_has_heads ? from : from.unsqueeze(axis);
  if (axis >= t.dim() || t.size(axis) <= *std::max_element(map.begin(), map.end()))
    throw Error("a tensor of the source has no axis of " + std::to_string(map.size()) + " heads");
  return t.index_select(axis, torch::tensor(map, torch::kInt64));
}

}  // namespace

std::map<std::string, torch::Tensor> named_weights(const torch::jit::Module& module) {
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : module.named_parameters(/*recurse=*/false)) out[p.name] = p.value;
  for (const auto& b : module.named_buffers(/*recurse=*/false)) out[b.name] = b.value;
  return out;
}

std::vector<std::string> transfer_weights(BuiltModel& target, const std::map<std::string, torch::Tensor>& source,
                                          const ModelMetadata& source_metadata) {
  const auto& species = target.metadata.species;
  const auto& source_species = source_metadata.species;
  const std::vector<int64_t> map = species_in_source(species, source_species);
  const std::vector<int64_t> heads = heads_in_source(target.metadata.hyperparameters, source_metadata.hyperparameters);
  const bool source_has_heads = !model_heads(source_metadata.hyperparameters).empty();
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : named_weights(target.module)) {
    const auto axes_it = target.species_axes.find(name);
    const SpeciesAxes axes = axes_it == target.species_axes.end() ? SpeciesAxes::none : axes_it->second;
    if (axes == SpeciesAxes::from_data) continue;
    const auto it = source.find(name);
    if (it == source.end()) throw Error("the source model has no '" + name + "': not the same architecture");
    torch::Tensor from = it->second.to(tensor.dtype());
    if (const auto h = target.head_axis.find(name); h != target.head_axis.end()) {
      try {
        from = with_target_heads(from, h->second, heads, source_has_heads);
      } catch (const Error& e) {
        throw Error("'" + name + "': " + e.what());
      }
    }
    if (const auto l = target.species_layout.find(name); l != target.species_layout.end())
      transfer_in_layout(tensor, from, name, l->second, map, static_cast<int64_t>(source_species.size()));
    else
      transfer_one(tensor, from, name, axes, map, static_cast<int64_t>(source_species.size()));
  }
  std::vector<std::string> added;
  for (std::size_t k = 0; k < species.size(); ++k)
    if (map[k] < 0) added.push_back(species[k]);
  return added;
}

std::map<std::string, torch::Tensor> read_model_weights(const std::string& path) {
  caffe2::serialize::PyTorchStreamReader reader(path);
  const std::string record = std::string("extra/") + kWeightsFile;
  if (!reader.hasRecord(record)) return {};
  auto [data, size] = reader.getRecord(record);
  const auto* bytes = static_cast<const char*>(data.get());
  const c10::IValue value = torch::jit::pickle_load(std::vector<char>(bytes, bytes + size));
  std::map<std::string, torch::Tensor> out;
  for (const auto& entry : value.toGenericDict()) out[entry.key().toStringRef()] = entry.value().toTensor();
  return out;
}

}  // namespace mlip
