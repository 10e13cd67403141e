// Dot products for the CPU kernels (cpu_kernels.h), in files built with -fopenmp-simd.
#pragma once

#include <cstdint>

#include "cpu_kernels.h"

namespace mlip::detail {

// Lanes of the dot products below: a multiple of any vector width used (AVX-512 holds 8 doubles).
constexpr int kDotLanes = 8;
static_assert(kDotLanes == 8, "lane_sum adds eight lanes");

// The sum of the kDotLanes partial sums, as a tree.
template <typename T> MLIP_KERNEL T lane_sum(const T* lane) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

// sum_u a[u] b[u], accumulated in kDotLanes lanes and then summed as a tree: `omp simd reduction`
// without -ffast-math ends in a chain of scalar additions through memory, which in a kernel of many
// short dot products (channels) costs more than the products.
template <typename T> MLIP_KERNEL T dot_of(const T* a, const T* b, int64_t n) {
  T lane[kDotLanes] = {};
  int64_t u = 0;
  for (; u + kDotLanes <= n; u += kDotLanes)
#pragma omp simd
    for (int v = 0; v < kDotLanes; ++v) lane[v] += a[u + v] * b[u + v];
  for (int v = 0; u < n; ++u, ++v) lane[v] += a[u] * b[u];
  return lane_sum(lane);
}

}  // namespace mlip::detail
