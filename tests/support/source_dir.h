// The repository root for tests and test tools: MLIP_SOURCE_DIR from the environment (ctest sets
// it; scripts/gpu-check.sh sets it where the binaries were built elsewhere), else the path
// compiled in.
#pragma once

#include <cstdlib>
#include <string>

namespace mlip::testing {

inline std::string source_dir() {
  if (const char* env = std::getenv("MLIP_SOURCE_DIR"); env != nullptr && *env != '\0') return env;
  return MLIP_SOURCE_DIR;
}

}  // namespace mlip::testing
