// scaled_silu's device kernels (mlip/ops/activation.h), for the host and the device
// (device_kernels.h): one element each.
#pragma once

#include <cmath>

#include "device_kernels.h"
#include "host_exp.h"

namespace mlip::kernels {

template <typename T> struct SiluArgs {
  using value_type = T;
  const T *x, *g, *h;  // input, the backward's incoming gradient, the second derivative's direction
  T c;
};

// CUDA's exp on the device; on the host one that vectorises (host_exp.h), the loop over these
// kernels being the CPU's scaled_silu.
template <typename T> MLIP_HD T exp_of(T x) {
#if defined(__CUDA_ARCH__)
  return exp(x);
#else
  return host_exp(x);
#endif
}
template <typename T> MLIP_HD T sigmoid_of(T x) { return T(1) / (T(1) + exp_of(-x)); }

// y = c x s
template <typename T> struct SiluForward {
  static constexpr Kernel id = Kernel::SiluForward;
  SiluArgs<T> o;
  T* y;
  MLIP_HD void operator()(int64_t i) const {
    const T x = o.x[i], s = sigmoid_of(x);  // s first: GCC makes a slow division of c x / (1 + e) otherwise
    y[i] = o.c * x * s;
  }
};

// gx = g c s (1 + x (1 - s))
template <typename T> struct SiluGrad {
  static constexpr Kernel id = Kernel::SiluGrad;
  SiluArgs<T> o;
  T* gx;
  MLIP_HD void operator()(int64_t i) const {
    const T x = o.x[i], s = sigmoid_of(x);
    gx[i] = o.g[i] * o.c * (s * (T(1) + x * (T(1) - s)));
  }
};

// d/dx of <h, gx>: h g c s (1 - s) (2 + x (1 - 2 s))
template <typename T> struct SiluSecondX {
  static constexpr Kernel id = Kernel::SiluSecondX;
  SiluArgs<T> o;
  T* dx;
  MLIP_HD void operator()(int64_t i) const {
    const T x = o.x[i], s = sigmoid_of(x);
    dx[i] = o.h[i] * o.g[i] * o.c * (s * (T(1) - s) * (T(2) + x * (T(1) - T(2) * s)));
  }
};

}  // namespace mlip::kernels
