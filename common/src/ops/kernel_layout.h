// The layout of every device kernel's functor as one number, computed where the functors are
// compiled: libmlip_cuda_ops.so (which reads a functor as its kernel's type) and the library that
// passes it must agree, so that a library built from other sources is refused even if nobody raised
// kDeviceKernelsVersion: each functor's size and alignment, and a digest of the files that define
// the functors (kernel_sources.h, which the build writes: cmake/KernelSources.cmake), so that fields
// reordered within one size are caught too. Plain C++.
#pragma once

#include <cstdint>

#include "activation_elements.h"
#include "bessel_radial_elements.h"
#include "device_kernels.h"
#include "equivariant_message_elements.h"
#include "graph_elements.h"
#include "kernel_sources.h"
#include "radial_net_elements.h"
#include "se_environment_elements.h"
#include "symmetric_contraction_elements.h"
#include "tabulated_embedding_elements.h"
#include "vector_message_elements.h"
#include "vector_polynomials_elements.h"

namespace mlip::kernels {

constexpr uint64_t mix_layout(uint64_t hash, uint64_t value) { return (hash ^ value) * 1099511628211ull; }

/// Each kernel's id, size and alignment in float64 and float32, and the sources' digest, hashed
/// (FNV-1a).
constexpr uint64_t kernel_layout() {
  uint64_t h = 1469598103934665603ull;
#define MLIP_KERNEL_LAYOUT(name)                                                                  \
  h = mix_layout(mix_layout(h, uint64_t(Kernel::name)), sizeof(name<double>));                    \
  h = mix_layout(mix_layout(h, alignof(name<double>)), sizeof(name<float>));                      \
  h = mix_layout(h, alignof(name<float>));
  MLIP_DEVICE_KERNELS(MLIP_KERNEL_LAYOUT)
#undef MLIP_KERNEL_LAYOUT
  return mix_layout(mix_layout(h, uint64_t(kDeviceKernelsVersion)), MLIP_KERNEL_SOURCES_HASH);
}

}  // namespace mlip::kernels
