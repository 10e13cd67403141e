// The operators' device kernels, written once for the host and the device: each kernel is a
// functor whose operator()(i) computes element i of one output from the operands alone (no
// atomics, every sum in one thread in a fixed order, so a run is deterministic). On a GPU,
// libmlip_cuda_ops.so (cuda/launch.cu) runs one thread per element; on the CPU a loop runs the
// same functors (ctest compares them with the CPU kernels and the aten formulations).
//
// This header is read by g++ (the operators) and by nvcc (the CUDA library): plain C++ and
// pointers only, no LibTorch.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MLIP_HD __host__ __device__ inline
#else
#define MLIP_HD inline
#endif

namespace mlip::kernels {

// Every device kernel, once (the X-macro makes the ids and the CUDA library's dispatch).
#define MLIP_DEVICE_KERNELS(X)                                                                             \
  X(MessageForward) X(MessageGradX) X(MessageGradS) X(MessageGradW) X(ContractForward) X(ContractGradX)    \
      X(ContractGradZ) X(ContractSumChunks) X(ContractSecondG) X(ContractSecondX) X(ContractSecondZ) X(VectorForwardS)           \
          X(VectorForwardV) X(VectorGradPhi) X(VectorGradW) X(VectorGradV) X(VectorGradUnit)                \
              X(TabulatedForward) X(TabulatedBackward) X(GraphCellOf) X(GraphReach) X(GraphCountEdges) X(GraphListEdges) X(GraphCountBySpecies) X(GraphListGrouped) X(TanhNetForward) X(TanhNetLayerBackward) \
                  X(SiluForward) X(SiluGrad) X(SiluSecondX) X(PolynomialForward) X(PolynomialGrad) \
                      X(BesselForward) X(BesselGrad) X(EnvForward) X(EnvBackward) X(EnvSecond)

enum class Kernel : int {
#define MLIP_KERNEL_ID(name) name,
  MLIP_DEVICE_KERNELS(MLIP_KERNEL_ID)
#undef MLIP_KERNEL_ID
};

/// The kernel's name, for messages.
inline const char* kernel_name(Kernel id) {
  static constexpr const char* names[] = {
#define MLIP_KERNEL_NAME(name) #name,
      MLIP_DEVICE_KERNELS(MLIP_KERNEL_NAME)
#undef MLIP_KERNEL_NAME
  };
  const int i = static_cast<int>(id);
  return i >= 0 && i < static_cast<int>(sizeof(names) / sizeof(names[0])) ? names[i] : "(unknown)";
}

// The C interface of libmlip_cuda_ops.so (loaded with dlopen: mlip itself links no CUDA library).
// mlip_cuda_launch runs `count` elements of kernel `id` (float64 if f64, else float32) whose functor
// is *functor, on the current LibTorch stream of `device`; it returns 0, or -1 with the reason in
// mlip_cuda_error(). mlip_cuda_memory fills bytes[kMemoryFields] of `device` (the driver's free and
// total, LibTorch's caching allocator's reserved, allocated and peak allocated since
// mlip_cuda_reset_peak); mlip_cuda_release_cache gives the allocator's unused blocks back to the
// driver; mlip_cuda_runs_on returns 0 if the library has code for `device` (its architecture), else
// -1 with the reason. Version: the layout of the functors and this interface; another version is
// refused, as is a library whose mlip_cuda_layout() is not kernel_layout() (kernel_layout.h: the
// functors' sizes and a digest of their sources).
constexpr int kDeviceKernelsVersion = 17;
enum MemoryField : int { kFree, kTotal, kReserved, kAllocated, kPeakAllocated, kMemoryFields };
extern "C" {
using CudaLaunch = int (*)(int id, int f64, const void* functor, int64_t count, int device);
using CudaError = const char* (*)();
using CudaVersion = int (*)();
using CudaLayout = uint64_t (*)();
using CudaMemory = int (*)(int device, int64_t* bytes);
using CudaResetPeak = int (*)(int device);
using CudaReleaseCache = int (*)();
using CudaRunsOn = int (*)(int device);
}

}  // namespace mlip::kernels
