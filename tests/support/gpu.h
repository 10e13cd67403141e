// For GPU test cases: why they cannot run here, or "" where a GPU is usable.
#pragma once

#include <string>

#include "mlip/model/device.h"

namespace mlip::testing {

/// "" when a GPU can be used by this process; else a reason that starts with "no GPU" (ctest's
/// SKIP_REGULAR_EXPRESSION for the GPU tests). Call it before any model runs on the CPU in the
/// process (mlip/model/device.h): ctest runs each discovered case in a process of its own.
inline std::string gpu_skip_reason() {
  if (cuda_device_count() > 0) return "";
  const std::string backend = load_cuda_backend();
  return backend.empty() ? "no GPU" : "no GPU usable: " + backend;
}

}  // namespace mlip::testing
