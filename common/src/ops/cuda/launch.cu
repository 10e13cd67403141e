// libmlip_cuda_ops.so's kernels: one thread per element of each device kernel's functor
// (device_kernels.h), the functors' code shared with the CPU's loop (ctest). No LibTorch here;
// stream.cpp gives the stream.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "../activation_elements.h"
#include "../bessel_radial_elements.h"
#include "../equivariant_message_elements.h"
#include "../graph_elements.h"
#include "../radial_net_elements.h"
#include "../se_environment_elements.h"
#include "../symmetric_contraction_elements.h"
#include "../tabulated_embedding_elements.h"
#include "../vector_message_elements.h"
#include "../vector_polynomials_elements.h"

namespace mlip::kernels {
namespace {

template <class F> __global__ void each_element(const F f, int64_t count) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) f(i);
}

template <class F> cudaError_t launch(const void* functor, int64_t count, cudaStream_t stream) {
  // The functor travels as the kernel's parameter: at most 4 KiB on every CUDA version and GPU.
  static_assert(sizeof(F) + sizeof(int64_t) <= 4096, "a device kernel's functor too large for a kernel parameter");
  constexpr int threads = 256;
  // A grid-stride loop past 2^20 blocks (each thread then takes several elements).
  const int64_t blocks = std::min<int64_t>((count + threads - 1) / threads, int64_t(1) << 20);
  // An error an earlier call left (cudaErrorNotReady from a query) is not this launch's; a sticky
  // one (a fault in an earlier kernel) comes back from the launch again.
  (void)cudaGetLastError();
  each_element<<<unsigned(blocks), threads, 0, stream>>>(*static_cast<const F*>(functor), count);
  return cudaGetLastError();
}

}  // namespace

// Whether this library's kernels have code for the current device (built for its architecture,
// or PTX it can compile): cudaSuccess, or the error a launch would give.
cudaError_t kernels_run_here() {
  cudaFuncAttributes attributes;
  return cudaFuncGetAttributes(&attributes, each_element<MessageForward<double>>);
}

// Kernel `id` in float64 (f64) or float32 on `stream`.
cudaError_t launch_on_stream(int id, int f64, const void* functor, int64_t count, cudaStream_t stream) {
  switch (id) {
#define MLIP_KERNEL_CASE(name) \
  case int(Kernel::name):      \
    return f64 ? launch<name<double>>(functor, count, stream) : launch<name<float>>(functor, count, stream);
    MLIP_DEVICE_KERNELS(MLIP_KERNEL_CASE)
#undef MLIP_KERNEL_CASE
  }
  return cudaErrorInvalidValue;
}

}  // namespace mlip::kernels
