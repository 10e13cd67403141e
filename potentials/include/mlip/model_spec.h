// The model section: what to build. One struct for every place that speaks of it: the trainer's
// config reader (`model:` in YAML, docs/config.md), the builders (mlip/potentials.h), the
// checkpoints (what a resumed run must match) and committees (a seed per member). No LibTorch
// here, so that the config reader stays free of it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlip {

/// `hyperparameters` holds the architecture's own keys (see each builder); keys it does not know
/// are an error naming them, missing ones take documented defaults.
struct ModelSpec {
  std::string architecture;           // "se_e2_a", "painn" or "mace" (mlip::architectures())
  std::vector<std::string> species;   // element symbols, model species index = position
  double cutoff = 6.0;                // Å
  std::string dtype = "float64";      // float32 | float64
  nlohmann::json hyperparameters = nlohmann::json::object();
  uint64_t seed = 1;                  // initial weights
  /// Short-range prior added to every architecture (potentials/src/repulsion.cpp): "none" or
  /// "zbl", the ZBL repulsion switched on over `repulsion_width` Å below each pair's shortest
  /// distance in the training data (fit_repulsion), so it is zero on every training structure.
  std::string repulsion = "none";
  double repulsion_width = 0.5;
};

/// What a checkpoint records of the spec: everything that makes another model (not the seed).
inline nlohmann::json checkpoint_settings(const ModelSpec& s) {
  return {{"architecture", s.architecture}, {"species", s.species},     {"cutoff", s.cutoff},
          {"dtype", s.dtype},               {"repulsion", s.repulsion}, {"repulsion_width", s.repulsion_width},
          {"hyperparameters", s.hyperparameters}};
}

}  // namespace mlip
