// ModelInfo's and ModelMetadata's plain parts: the metadata of a model file (mlip/metadata.json)
// read and written as JSON. No LibTorch call: the fuzz target fuzz_metadata builds this file alone.
#include "mlip/model/model_metadata.h"

#include "mlip/data/elements.h"
#include "mlip/error.h"

namespace mlip {

int ModelInfo::species_index(const std::string& element) const {
  for (std::size_t i = 0; i < species.size(); ++i) {
    if (species[i] == element) return static_cast<int>(i);
  }
  return -1;
}

nlohmann::json ModelMetadata::to_json() const {
  return {{"format_version", format_version},
          {"architecture", architecture},
          {"species", species},
          {"cutoff", cutoff},
          {"message_passing_layers", message_passing_layers},
          {"dtype", dtype},
          {"units", {{"length", length_unit}, {"energy", energy_unit}}},
          {"hyperparameters", hyperparameters},
          {"provenance", provenance}};
}

ModelMetadata ModelMetadata::from_json(const nlohmann::json& j, const std::string& where) {
  auto need = [&](const char* key) -> const nlohmann::json& {
    if (!j.contains(key)) throw Error(where + ": metadata has no '" + key + "'");
    return j.at(key);
  };
  ModelMetadata m;
  try {
    m.format_version = need("format_version").get<int>();
    if (m.format_version != kFormatVersion) {
      throw Error(where + ": model format version " + std::to_string(m.format_version) +
                  " is not supported (this build reads version " + std::to_string(kFormatVersion) + ")");
    }
    m.architecture = need("architecture").get<std::string>();
    m.species = need("species").get<std::vector<std::string>>();
    m.cutoff = need("cutoff").get<double>();
    m.message_passing_layers = need("message_passing_layers").get<int>();
    m.dtype = need("dtype").get<std::string>();
    const auto& units = need("units");
    m.length_unit = units.at("length").get<std::string>();
    m.energy_unit = units.at("energy").get<std::string>();
    if (j.contains("hyperparameters")) m.hyperparameters = j.at("hyperparameters");
    m.compressed = m.hyperparameters.is_object() && m.hyperparameters.contains("compression");
    if (j.contains("provenance")) m.provenance = j.at("provenance");
  } catch (const nlohmann::json::exception& e) {
    throw Error(where + ": malformed metadata: " + e.what());
  }
  if (m.species.empty()) throw Error(where + ": metadata lists no species");
  for (const auto& el : m.species) {
    if (atomic_number(el) == 0) throw Error(where + ": metadata species '" + el + "' is not an element");
  }
  if (!(m.cutoff > 0.0)) throw Error(where + ": metadata cutoff must be positive");
  if (m.message_passing_layers < 0) throw Error(where + ": metadata message_passing_layers < 0");
  if (m.dtype != "float32" && m.dtype != "float64") {
    throw Error(where + ": metadata dtype '" + m.dtype + "' is neither float32 nor float64");
  }
  if (m.length_unit != "angstrom" || m.energy_unit != "eV") {
    throw Error(where + ": model units " + m.length_unit + "/" + m.energy_unit +
                " are not supported (angstrom/eV)");
  }
  return m;
}

}  // namespace mlip
