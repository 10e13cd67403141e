// mlip-trainer import: a model file of any architecture from its settings and weights made
// elsewhere (python/mace_to_mlip.py writes them from a mace-torch model).
#include <fstream>
#include <iterator>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>
#include <torch/serialize.h>

#include "mlip/error.h"
#include "mlip/potentials.h"
#include "training.h"

namespace mlip::trainer {
namespace {

ModelSpec read_spec(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error(path + ": cannot be read");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": not JSON (" + e.what() + ")");
  }
  auto field = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key)) throw Error(path + ": missing key '" + key + "'");
    return j.at(key);
  };
  ModelSpec spec;
  try {
    spec.architecture = field("architecture").get<std::string>();
    spec.species = field("species").get<std::vector<std::string>>();
    spec.cutoff = field("cutoff").get<double>();
    spec.dtype = j.value("dtype", std::string("float64"));
    spec.hyperparameters = j.value("hyperparameters", nlohmann::json::object());
  } catch (const nlohmann::json::exception& e) {
    throw Error(path + ": a key has the wrong type (" + e.what() + ")");
  }
  return spec;
}

std::map<std::string, torch::Tensor> read_weights(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot be read");
  const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  c10::IValue value;
  try {
    value = torch::pickle_load(bytes);
  } catch (const std::exception& e) {
    throw Error(path + ": not a file written by torch.save (" + std::string(e.what()).substr(0, 200) + ")");
  }
  if (!value.isGenericDict()) throw Error(path + ": expected a dict of tensors by name");
  std::map<std::string, torch::Tensor> out;
  for (const auto& item : value.toGenericDict()) {
    if (!item.key().isString() || !item.value().isTensor())
      throw Error(path + ": expected a dict of tensors by name (an entry is not)");
    out[item.key().toStringRef()] = item.value().toTensor();
  }
  return out;
}

}  // namespace

void import_model(const std::string& spec_path, const std::string& weights_path, const std::string& output,
                  const std::function<void(const std::string&)>& log) {
  const ModelSpec spec = read_spec(spec_path);
  BuiltModel built = build_model(spec);
  const std::map<std::string, torch::Tensor> given = read_weights(weights_path);
  const std::map<std::string, torch::Tensor> own = named_weights(built.module);
  torch::NoGradGuard no_grad;  // setting weights
  for (const auto& [name, t] : given) {
    const auto it = own.find(name);
    if (it == own.end())
      throw Error(weights_path + ": '" + name + "' is not a tensor of a " + spec.architecture +
                  " model with the hyperparameters of " + spec_path);
    if (it->second.sizes() != t.sizes())
      throw Error(fmt::format("{}: '{}' has shape [{}], the model's is [{}]", weights_path, name,
                              fmt::join(t.sizes(), ", "), fmt::join(it->second.sizes(), ", ")));
    it->second.copy_(t.to(it->second.dtype()));
  }
  for (const auto& p : built.module.named_parameters(/*recurse=*/true))
    if (!given.count(p.name)) throw Error(weights_path + ": lacks the parameter '" + p.name + "'");
  built.metadata.provenance["imported_from"] = weights_path;
  export_frozen(built.module, built.metadata, output);
  if (log) log(fmt::format("imported {} model: {} species, cutoff {} A, {} tensors", spec.architecture,
                           spec.species.size(), spec.cutoff, given.size()));
}

}  // namespace mlip::trainer
