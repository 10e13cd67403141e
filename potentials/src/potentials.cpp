#include "mlip/potentials.h"

#include <torch/csrc/jit/serialization/pickle.h>

#include "mlip/data/elements.h"
#include "mlip/error.h"

namespace mlip {

std::vector<std::string> architectures() { return {"se_e2_a", "painn", "mace"}; }

torch::Dtype torch_dtype(const ModelSpec& spec) {
  if (spec.dtype == "float32") return torch::kFloat32;
  if (spec.dtype == "float64") return torch::kFloat64;
  throw Error("model: dtype must be float32 or float64, not '" + spec.dtype + "'");
}

BuiltModel build_model(const ModelSpec& spec) {
  if (spec.species.empty()) throw Error("model: no species given");
  for (const auto& el : spec.species) {
    if (atomic_number(el) == 0) throw Error("model: species '" + el + "' is not an element");
  }
  if (!(spec.cutoff > 0.0)) throw Error("model: cutoff must be positive");
  torch_dtype(spec);  // float32 or float64
  BuiltModel built;
  if (spec.architecture == "se_e2_a") {
    built = build_se_e2_a(spec);
  } else if (spec.architecture == "painn") {
    built = build_painn(spec);
  } else if (spec.architecture == "mace") {
    built = build_mace(spec);
  } else {
    throw Error("model: unknown architecture '" + spec.architecture + "' (known: se_e2_a, painn, mace)");
  }
  if (spec.repulsion != "none")
    built.metadata.hyperparameters["repulsion"] = {{"type", spec.repulsion}, {"width", spec.repulsion_width}};
  return built;
}


void fit_descriptor_statistics(BuiltModel& model, const std::vector<const Frame*>& frames) {
  if (model.metadata.architecture == "se_e2_a") fit_se_e2_a_statistics(model, frames);
  if (model.metadata.architecture == "painn") fit_painn_statistics(model, frames);
  if (model.metadata.architecture == "mace") fit_mace_statistics(model, frames);
}

std::vector<torch::Tensor> trainable_parameters(const torch::jit::Module& module) {
  std::vector<torch::Tensor> params;
  for (const auto& p : module.named_parameters(/*recurse=*/true))
    if (p.value.requires_grad()) params.push_back(p.value);
  return params;
}

void export_frozen(const torch::jit::Module& module, const ModelMetadata& metadata, const std::string& path) {
  torch::jit::Module copy = module.clone();
  copy.eval();
  // Methods a compressed model reuses (se_e2_a: compress.cpp), a multi-head model's
  // forward_heads, and a message-passing model's parts (mp_*: mlip/model/message_passing.h)
  // stay callable on the frozen model.
  std::vector<std::string> preserved;
  for (const char* method : {"environment", "embedding", "padding", "energies", "repulsion", "forward_grouped",
                             "energies_grouped", "repulsion_all_edges", "forward_heads",
                             "forward_grouped_heads"})
    if (copy.find_method(method)) preserved.emplace_back(method);
  for (const auto& method : copy.get_methods())
    if (method.name().rfind("mp_", 0) == 0) preserved.push_back(method.name());
  torch::jit::Module frozen = torch::jit::freeze(copy, preserved);
  // The weights by name beside the frozen graph, so that the file can start a fine-tuning
  // (training.init_from); not for compressed models, whose embedding nets are tables.
  torch::jit::ExtraFilesMap weights;
  if (!metadata.hyperparameters.contains("compression")) {
    c10::Dict<std::string, torch::Tensor> dict;
    for (const auto& [name, t] : named_weights(module)) dict.insert(name, t.detach().cpu());
    const std::vector<char> bytes = torch::jit::pickle_save(dict);
    weights[kWeightsFile] = std::string(bytes.begin(), bytes.end());
  }
  save_model(frozen, metadata, path, weights);
}

}  // namespace mlip
