// libmlip_cuda_ops.so's C interface (device_kernels.h): the device kernels (launch.cu) on LibTorch's
// current stream of the device, so they order with the model's other operations and with CUDA
// graph recording.
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>

#include <exception>
#include <string>

#include "../device_kernels.h"

namespace mlip::kernels {
cudaError_t launch_on_stream(int id, int f64, const void* functor, int64_t count, cudaStream_t stream);
}

namespace {
thread_local std::string last_error;
}

extern "C" {

__attribute__((visibility("default"))) int mlip_cuda_version() { return mlip::kernels::kDeviceKernelsVersion; }

__attribute__((visibility("default"))) const char* mlip_cuda_error() { return last_error.c_str(); }

__attribute__((visibility("default"))) int mlip_cuda_launch(int id, int f64, const void* functor, int64_t count,
                                                            int device) {
  try {
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
    const cudaError_t rc = mlip::kernels::launch_on_stream(id, f64, functor, count, stream);
    if (rc == cudaSuccess) return 0;
    last_error = std::string("launch failed: ") + cudaGetErrorString(rc);
  } catch (const std::exception& e) {
    last_error = e.what();
  }
  return -1;
}

}  // extern "C"
