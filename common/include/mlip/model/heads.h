// The output heads of a model with several (hyperparameters `heads`, names, and `head`, the one
// forward() evaluates; MACE), read from its hyperparameters. No LibTorch: the trainer's config
// reader (and its fuzz target), the potentials and the model runtime share these.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlip/error.h"

namespace mlip {

/// The heads' names; empty for a model with one output. Throws mlip::Error when `heads` is not a
/// list of names.
inline std::vector<std::string> model_heads(const nlohmann::json& hyperparameters) {
  if (!hyperparameters.is_object() || !hyperparameters.contains("heads")) return {};
  try {
    return hyperparameters.at("heads").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception&) {
    throw Error("hyperparameter 'heads' must be a list of names (got " + hyperparameters.at("heads").dump() + ")");
  }
}

/// The heads as "a, b, c" (for messages).
inline std::string head_list(const std::vector<std::string>& heads) {
  std::string list;
  for (const auto& h : heads) list += (list.empty() ? "" : ", ") + h;
  return list;
}

/// The index of head `name` in `heads`, or -1.
inline int64_t find_head(const std::vector<std::string>& heads, const std::string& name) {
  const auto it = std::find(heads.begin(), heads.end(), name);
  return it == heads.end() ? -1 : int64_t(it - heads.begin());
}

/// The index of the head forward() evaluates (`head`, default the first; 0 without heads).
inline int64_t default_head(const nlohmann::json& hyperparameters) {
  const std::vector<std::string> heads = model_heads(hyperparameters);
  if (heads.empty() || !hyperparameters.contains("head") || hyperparameters.at("head") == "") return 0;
  const nlohmann::json& name = hyperparameters.at("head");
  const int64_t index = name.is_string() ? find_head(heads, name.get<std::string>()) : -1;
  if (index < 0) throw Error("hyperparameter 'head' (" + name.dump() + ") is not one of 'heads'");
  return index;
}

}  // namespace mlip
