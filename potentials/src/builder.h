// Helpers shared by the architecture builders: hyperparameters checked key by key, parameters
// with seeded initialisation, and small pieces of generated TorchScript.
#pragma once

#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/csrc/jit/frontend/resolver.h>
#include <torch/csrc/jit/frontend/sugared_value.h>
#include <torch/script.h>

#include "mlip/error.h"
#include "mlip/ops/operators.h"
#include "mlip/potentials.h"

namespace mlip::detail {

// C++'s TorchScript compiler knows `torch` only; `mlip_ops` names the operators of mlip's library
// (saved as ops.mlip.*, which Python resolves once the library is loaded).
struct MlipOpsResolver : torch::jit::Resolver {
  std::shared_ptr<torch::jit::SugaredValue> resolveValue(const std::string& name, torch::jit::GraphFunction&,
                                                         const torch::jit::SourceRange&) override {
    if (name == "torch") return std::make_shared<torch::jit::BuiltinModule>("aten");
    if (name == "mlip_ops") return std::make_shared<torch::jit::BuiltinModule>("mlip");
    return nullptr;
  }
  c10::TypePtr resolveType(const std::string&, const torch::jit::SourceRange&) override { return nullptr; }
};

/// Reads hyperparameters with defaults; finish() rejects keys that were never asked for.
class HyperParameters {
 public:
  HyperParameters(const nlohmann::json& j, std::string architecture)
      : json_(j.is_null() ? nlohmann::json::object() : j), architecture_(std::move(architecture)) {
    if (!json_.is_object()) throw Error(architecture_ + ": hyperparameters must be a mapping");
  }

  template <typename T> T get(const std::string& key, const T& fallback) {
    used_.insert(key);
    T value = fallback;
    if (json_.contains(key)) {
      try {
        value = json_.at(key).get<T>();
      } catch (const nlohmann::json::exception&) {
        throw Error(architecture_ + ": hyperparameter '" + key + "' has the wrong type (" + json_.at(key).dump() + ")");
      }
    }
    resolved_[key] = value;
    return value;
  }

  /// Checks that no unknown key was given; returns every hyperparameter with defaults filled in.
  nlohmann::json finish() const {
    for (const auto& [key, value] : json_.items()) {
      if (!used_.count(key)) {
        std::string known;
        for (const auto& k : used_) known += (known.empty() ? "" : ", ") + k;
        throw Error(architecture_ + ": unknown hyperparameter '" + key + "' (known: " + known + ")");
      }
    }
    return resolved_;
  }

  [[noreturn]] void fail(const std::string& key, const std::string& why) const {
    throw Error(architecture_ + ": hyperparameter '" + key + "' " + why);
  }

 private:
  nlohmann::json json_;
  std::string architecture_;
  std::set<std::string> used_;
  nlohmann::json resolved_ = nlohmann::json::object();
};

/// A torch::jit::Module under construction, with a seeded generator for initialisation.
class ModuleBuilder {
 public:
  ModuleBuilder(const std::string& type_name, torch::Dtype dtype, uint64_t seed)
      : module_("__torch__.mlip." + type_name),
        options_(torch::TensorOptions().dtype(dtype)),
        generator_(at::detail::createCPUGenerator(seed)) {
    // LibTorch 1.13: a C++-built module has no `training` attribute unless registered, and then
    // eval() and freeze() work as for Python modules.
    module_.register_attribute("training", c10::BoolType::get(), true);
  }

  /// A trainable parameter drawn from N(0, std^2).
  void normal(const std::string& name, at::IntArrayRef shape, double std, SpeciesAxes axes = SpeciesAxes::none) {
    torch::Tensor t = torch::randn(shape, generator_, options_) * std;
    module_.register_parameter(name, t.requires_grad_(true), false);
    note(name, axes);
  }
  void constant(const std::string& name, at::IntArrayRef shape, double value, SpeciesAxes axes = SpeciesAxes::none) {
    module_.register_parameter(name, torch::full(shape, value, options_).requires_grad_(true), false);
    note(name, axes);
  }
  void buffer(const std::string& name, const torch::Tensor& value, SpeciesAxes axes = SpeciesAxes::none) {
    module_.register_buffer(name, value.to(options_.dtype()));
    note(name, axes);
  }
  /// An integer (index) buffer, kept as it is: a constant of the hyperparameters, not transferred
  /// by fine-tuning (the target's own).
  void index_buffer(const std::string& name, const torch::Tensor& value) {
    module_.register_buffer(name, value.to(torch::kInt64));
    note(name, SpeciesAxes::from_data);
  }
  /// Marks a flat parameter as a block per species (SpeciesLayout; fine-tuning with other species).
  void species_layout(const std::string& name, std::vector<int64_t> shape, int64_t axis, bool per_sqrt_species) {
    species_layout_[name] = SpeciesLayout{std::move(shape), axis, per_sqrt_species};
  }
  /// Marks a tensor as having one entry per output head along `axis` (multi-head models).
  void head_axis(const std::string& name, int64_t axis) { head_axis_[name] = axis; }
  /// Marks parameters as the descriptor's (training.freeze: descriptor).
  void descriptor(const std::string& name) { descriptor_.insert(name); }
  /// Marks every parameter registered so far as the descriptor's, but those `trained` names.
  template <typename Trained> void descriptor_all_but(Trained trained) {
    for (const auto& p : module_.named_parameters(/*recurse=*/false))
      if (!trained(p.name)) descriptor_.insert(p.name);
  }
  void float_attribute(const std::string& name, double value) {
    module_.register_attribute(name, c10::FloatType::get(), value);
  }
  torch::TensorOptions options() const { return options_; }

  /// Defines forward() from `source` and returns the module with its metadata.
  BuiltModel finish(const std::string& source, const ModelSpec& spec, const std::string& architecture,
                    int message_passing_layers, const nlohmann::json& hyperparameters) {
    link_operators();
    module_.define(source, std::make_shared<MlipOpsResolver>());
    BuiltModel built;
    built.module = module_;
    built.metadata.architecture = architecture;
    built.metadata.species = spec.species;
    built.metadata.cutoff = spec.cutoff;
    built.metadata.message_passing_layers = message_passing_layers;
    built.metadata.dtype = spec.dtype;
    built.metadata.hyperparameters = hyperparameters;
    built.species_axes = species_axes_;
    built.species_layout = species_layout_;
    built.head_axis = head_axis_;
    built.descriptor = descriptor_;
    return built;
  }

 private:
  void note(const std::string& name, SpeciesAxes axes) {
    if (axes != SpeciesAxes::none) species_axes_[name] = axes;
  }
  std::map<std::string, SpeciesAxes> species_axes_;
  std::map<std::string, SpeciesLayout> species_layout_;
  std::map<std::string, int64_t> head_axis_;
  std::set<std::string> descriptor_;
  torch::jit::Module module_;
  torch::TensorOptions options_;
  at::Generator generator_;
};

/// The per-species energy buffers every architecture has: E_i = scale[s] * raw_i + shift[s]; with
/// `n_heads` > 0 one column per head, (n_species, n_heads).
inline void add_energy_buffers(ModuleBuilder& b, int64_t n_species, int64_t n_heads = 0) {
  const std::vector<int64_t> shape = n_heads > 0 ? std::vector<int64_t>{n_species, n_heads} : std::vector<int64_t>{n_species};
  b.buffer("energy_shift", torch::zeros(shape), SpeciesAxes::species);
  b.buffer("energy_scale", torch::ones(shape), SpeciesAxes::species);
  if (n_heads > 0)
    for (const char* name : {"energy_shift", "energy_scale"}) b.head_axis(name, 1);
}

/// Registers the repulsion prior's buffers for `spec.repulsion` and returns the TorchScript lines
/// that compute `e_rep` (n_centers,) from forward()'s arguments; "" when the spec has none.
std::string add_repulsion(ModuleBuilder& b, const ModelSpec& spec);

/// The lines of add_repulsion() alone: on the edges within reach of the prior (picked with
/// nonzero), or on every edge (static shapes, for grouped graphs; the same energies).
std::string repulsion_source(bool near_edges_only);

/// The lines before a message-passing model's last layer that keep only the edges into centres
/// (`edges`: the names of its per-edge tensors, the centre indices first): picked on the device
/// (forward), or the first edge_groups[0] of them (forward_grouped, on the message-passing layout of
/// mlip/model/grouped_graph.h: static shapes).
inline std::string centre_edges_source(bool grouped, const std::vector<std::string>& edges) {
  std::ostringstream src;
  if (grouped) {
    src << "    n_in = edge_groups[0]\n";
    for (const std::string& t : edges) src << "    " << t << " = " << t << ".narrow(0, 0, n_in)\n";
    src << "    n_out = n_centers\n";
    return src.str();
  }
  src << "    if n_centers < n_out:\n"
      << "        sel = torch.nonzero(" << edges.front() << " < n_centers).squeeze(1)\n";
  for (const std::string& t : edges) src << "        " << t << " = " << t << ".index_select(0, sel)\n";
  src << "        n_out = n_centers\n";
  return src.str();
}

// DeePMD's residual rule for a tanh layer of width `in` -> `out`: 1 (y + tanh) where the width is
// kept, 2 ([y, y] + tanh) where it doubles, 0 (none) otherwise; mlip::tanh_net's `residual` codes.
inline int residual_kind(int64_t in, int64_t out) { return out == in ? 1 : out == 2 * in ? 2 : 0; }

// residual_kind of each layer of a net of these widths (input first).
inline std::vector<int64_t> residual_kinds(const std::vector<int64_t>& widths) {
  std::vector<int64_t> kinds;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) kinds.push_back(residual_kind(widths[l], widths[l + 1]));
  return kinds;
}

inline std::string num(double x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  std::string s = buf;
  if (s.find_first_of(".eE") == std::string::npos) s += ".0";  // a float literal in TorchScript
  return s;
}

}  // namespace mlip::detail
