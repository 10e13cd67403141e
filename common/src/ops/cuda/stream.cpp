// libmlip_cuda_ops.so's C interface (device_kernels.h): the device kernels (launch.cu) on LibTorch's
// current stream of the device, so they order with the model's other operations and with CUDA
// graph recording.
#include <ATen/Context.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <exception>
#include <stdexcept>
#include <string>

#include "../device_kernels.h"
#include "../kernel_layout.h"

namespace mlip::kernels {
cudaError_t launch_on_stream(int id, int f64, const void* functor, int64_t count, cudaStream_t stream);
cudaError_t kernels_run_here();
}

namespace {
thread_local std::string last_error;

// LibTorch's CUDA state (its caching allocator's per-device tables) is made on the first CUDA
// tensor; before one, the allocator's figures throw. Most likely why the GPU check of 2026-12-04
// failed DeviceMemoryGpu.FiguresFollowAnAllocation, which asks for them first (it printed no
// error text). Made here.
void init_torch_cuda() { at::globalContext().lazyInitDevice(c10::DeviceType::CUDA); }
}  // namespace

extern "C" {

__attribute__((visibility("default"))) int mlip_cuda_version() { return mlip::kernels::kDeviceKernelsVersion; }

__attribute__((visibility("default"))) uint64_t mlip_cuda_layout() { return mlip::kernels::kernel_layout(); }

__attribute__((visibility("default"))) const char* mlip_cuda_error() { return last_error.c_str(); }

__attribute__((visibility("default"))) int mlip_cuda_launch(int id, int f64, const void* functor, int64_t count,
                                                            int device) {
  try {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));   // the rank's GPU, not the current one
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
    const cudaError_t rc = mlip::kernels::launch_on_stream(id, f64, functor, count, stream);
    if (rc == cudaSuccess) return 0;
    last_error = std::string("launch failed: ") + cudaGetErrorString(rc);
    // A fault inside a kernel is reported by the next launch or wait, whichever kernel it was.
    if (rc == cudaErrorIllegalAddress || rc == cudaErrorLaunchFailure || rc == cudaErrorMisalignedAddress ||
        rc == cudaErrorIllegalInstruction || rc == cudaErrorHardwareStackError || rc == cudaErrorAssert)
      last_error += " (possibly a fault of an earlier kernel, reported here: CUDA_LAUNCH_BLOCKING=1 reports each at its own launch)";
    if (rc == cudaErrorStreamCaptureInvalidated)
      last_error += " (the CUDA graph being recorded was broken before this kernel, by an operation that cannot be "
                    "recorded: TORCH_SHOW_CPP_STACKTRACES=1 shows where its own error came from)";
  } catch (const std::exception& e) {
    last_error = e.what();
  }
  return -1;
}

__attribute__((visibility("default"))) int mlip_cuda_runs_on(int device) {
  try {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    const cudaError_t rc = mlip::kernels::kernels_run_here();
    if (rc == cudaSuccess) return 0;
    cudaGetLastError();   // not sticky: clear it, so that it is not reported by a later launch
    cudaDeviceProp prop;
    const bool known = cudaGetDeviceProperties(&prop, device) == cudaSuccess;
    last_error = cudaGetErrorString(rc);
    if (rc == cudaErrorNoKernelImageForDevice || rc == cudaErrorInvalidDeviceFunction)
      last_error += " (this GPU is sm_" +
                    (known ? std::to_string(prop.major) + std::to_string(prop.minor) : std::string("?")) +
                    "; build mlip with -DMLIP_CUDA_ARCHITECTURES naming it)";
  } catch (const c10::Error& e) {
    last_error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    last_error = e.what();
  }
  return -1;
}

__attribute__((visibility("default"))) int mlip_cuda_memory(int device, int64_t* bytes) {
  try {
    init_torch_cuda();
    const auto index = static_cast<c10::DeviceIndex>(device);
    size_t free = 0, total = 0;
    cudaError_t rc;
    {
      // LibTorch's guard: it gives back the thread's device without making a context there
      // (a plain cudaSetDevice would, on a device the thread never used: GPU 0's memory).
      const c10::cuda::CUDAGuard guard(index);
      rc = cudaMemGetInfo(&free, &total);
    }
    if (rc != cudaSuccess) throw std::runtime_error(std::string("cudaMemGetInfo: ") + cudaGetErrorString(rc));
    constexpr auto all = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(index);
    bytes[mlip::kernels::kFree] = static_cast<int64_t>(free);
    bytes[mlip::kernels::kTotal] = static_cast<int64_t>(total);
    bytes[mlip::kernels::kReserved] = stats.reserved_bytes[all].current;
    bytes[mlip::kernels::kAllocated] = stats.allocated_bytes[all].current;
    bytes[mlip::kernels::kPeakAllocated] = stats.allocated_bytes[all].peak;
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  }
  return -1;
}

__attribute__((visibility("default"))) int mlip_cuda_reset_peak(int device) {
  try {
    init_torch_cuda();
    c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(device));
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  }
  return -1;
}

__attribute__((visibility("default"))) int mlip_cuda_release_cache() {
  try {
    c10::cuda::CUDACachingAllocator::emptyCache();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
  }
  return -1;
}

}  // extern "C"
