// The whole metadata of a model file (`mlip/metadata.json`): the plain ModelInfo that runners
// need, plus the architecture's hyperparameters and the provenance as JSON. For the trainer,
// the architectures and tools; the LAMMPS pair style includes only mlip/model/model.h.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "mlip/model/model.h"

namespace mlip {

struct ModelMetadata : ModelInfo {
  static constexpr int kFormatVersion = 1;
  static constexpr const char* kExtraFile = "mlip/metadata.json";

  int format_version = kFormatVersion;
  nlohmann::json hyperparameters = nlohmann::json::object();
  nlohmann::json provenance = nlohmann::json::object();

  nlohmann::json to_json() const;
  /// Throws mlip::Error naming `where` and the offending key.
  static ModelMetadata from_json(const nlohmann::json& j, const std::string& where);
};

}  // namespace mlip
