#include "mlip/model/device_memory.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

#include <c10/util/Exception.h>

#include "../ops/device_launch.h"

namespace mlip {

namespace {

template <class F> F cuda_function(const char* name) { return reinterpret_cast<F>(detail::cuda_symbol(name)); }

// Whether LibTorch's allocator may give cached blocks back to the driver (cudaFree) when an
// allocation fails inside a CUDA graph's recording, which a recording may not do: it does with
// max_split_size_mb in its configuration (pytorch/pytorch#159594).
bool allocator_frees_while_recording() {
  for (const char* name : {"PYTORCH_ALLOC_CONF", "PYTORCH_CUDA_ALLOC_CONF"})
    if (const char* conf = std::getenv(name); conf != nullptr && std::strstr(conf, "max_split_size_mb") != nullptr)
      return true;
  return false;
}

// CUDA's errors for a call a recording may not make, and for the recording it then invalidated.
bool refused_while_recording(const char* what) {
  return std::strstr(what, "operation not permitted when stream is capturing") != nullptr ||
         std::strstr(what, "operation failed due to a previous error during capture") != nullptr;
}

}  // namespace

std::optional<DeviceMemory> device_memory(const torch::Device& device) {
  if (!device.is_cuda()) return std::nullopt;
  static const auto query = cuda_function<kernels::CudaMemory>("mlip_cuda_memory");
  int64_t bytes[kernels::kMemoryFields] = {};
  if (query == nullptr || query(device.has_index() ? device.index() : 0, bytes) != 0) return std::nullopt;
  DeviceMemory m;
  m.free = bytes[kernels::kFree];
  m.total = bytes[kernels::kTotal];
  m.cached = std::max<int64_t>(0, bytes[kernels::kReserved] - bytes[kernels::kAllocated]);
  m.allocated = bytes[kernels::kAllocated];
  m.peak = bytes[kernels::kPeakAllocated];
  return m;
}

void reset_peak_memory(const torch::Device& device) {
  if (!device.is_cuda()) return;
  static const auto reset = cuda_function<kernels::CudaResetPeak>("mlip_cuda_reset_peak");
  if (reset != nullptr) reset(device.has_index() ? device.index() : 0);
}

bool release_cached_memory() {
  static const auto release = cuda_function<kernels::CudaReleaseCache>("mlip_cuda_release_cache");
  return release == nullptr || release() == 0;
}

bool is_out_of_memory(const std::exception& e) {
  if (dynamic_cast<const c10::OutOfMemoryError*>(&e) != nullptr) return true;
  // The TorchScript interpreter passes an operator's error on as another exception with its own
  // traceback added (mlip::Error from mlip::evaluate_module); CUDA's own error reads "out of memory"
  // (a kernel launch, cudaErrorMemoryAllocation).
  const char* what = e.what();
  if (std::strstr(what, "CUDA out of memory") != nullptr || std::strstr(what, "CUDA error: out of memory") != nullptr ||
      std::strstr(what, "launch failed: out of memory") != nullptr)
    return true;
  // A recording whose allocation failed, where the allocator then freed its cache (refused).
  return refused_while_recording(what) && allocator_frees_while_recording();
}

std::string out_of_memory_note(const std::exception& e) {
  if (!refused_while_recording(e.what()) || !allocator_frees_while_recording()) return {};
  return " (max_split_size_mb in PYTORCH_ALLOC_CONF or PYTORCH_CUDA_ALLOC_CONF makes LibTorch's allocator free "
         "memory inside a CUDA graph's recording when an allocation fails, which CUDA refuses: this error was taken "
         "for running out of memory; without that setting the recording would say what it is)";
}

int64_t ChunkSizer::chunk(int64_t centres, int64_t available) const {
  int64_t n = centres;
  if (!seen()) {
    n = std::min(n, first_);
  } else {
    const double fits = std::floor(headroom_ * static_cast<double>(available) / std::max(bytes_per_centre(), 1.0));
    n = static_cast<int64_t>(std::min(static_cast<double>(n), fits));
  }
  if (limit_ > 0) n = std::min(n, limit_);
  return std::max<int64_t>(n, 1);
}

void ChunkSizer::observe(int64_t centres, int64_t edges, int64_t bytes) {
  if (centres <= 0 || bytes <= 0) return;
  const double e = static_cast<double>(std::max<int64_t>(edges, 1));
  bytes_per_edge_ = std::max(bytes_per_edge_, static_cast<double>(bytes) / e);
  edges_per_centre_ = e / static_cast<double>(centres);
}

void ChunkSizer::out_of_memory(int64_t centres) {
  if (held_ > 0 && centres > held_) {
    // A call above the limit that held, soon after the raise: that limit again (not half the
    // call, which may have been smaller than twice it), and a longer wait before the next try.
    limit_ = held_;
    retry_ *= 2;
  } else {
    const int64_t half = std::max<int64_t>(1, centres / 2);
    limit_ = limit_ > 0 ? std::min(limit_, half) : half;
  }
  held_ = 0;
  calm_calls_ = 0;
}

void ChunkSizer::calm(int64_t wanted) {
  if (limit_ == 0 && held_ == 0) return;
  if (++calm_calls_ < retry_) return;
  calm_calls_ = 0;
  if (limit_ == 0) {   // no limit for a whole wait: a later error is a new one
    held_ = 0;
    return;
  }
  held_ = limit_;
  limit_ = 2 * limit_ >= wanted ? 0 : 2 * limit_;   // a limit that could not bind goes
}

}  // namespace mlip
