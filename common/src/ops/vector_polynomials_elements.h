// vector_polynomials' device kernel (mlip/ops/vector_polynomials.h), for the host and the device
// (device_kernels.h): one output element each.
#pragma once

#include <cstdint>

#include "device_kernels.h"

namespace mlip::kernels {

template <typename T> struct PolynomialArgs {
  using value_type = T;
  const T* u;               // (E, 3)
  const int64_t* terms;     // (T, 4): output, powers of u's three components
  const T* coefficients;    // (T,)
  const int64_t* first;     // (n + 1,): output i's terms are [first[i], first[i + 1])
  int64_t n;                // outputs per row
};

template <typename T> MLIP_HD T power_of(T x, int64_t p) {
  T r = T(1);
  for (int64_t k = 0; k < p; ++k) r *= x;
  return r;
}

// y[e, i], element e n + i
template <typename T> struct PolynomialForward {
  static constexpr Kernel id = Kernel::PolynomialForward;
  PolynomialArgs<T> o;
  T* y;
  MLIP_HD void operator()(int64_t idx) const {
    const int64_t e = idx / o.n, i = idx - e * o.n;
    const T x0 = o.u[3 * e], x1 = o.u[3 * e + 1], x2 = o.u[3 * e + 2];
    T sum = T(0);
    for (int64_t t = o.first[i]; t < o.first[i + 1]; ++t) {
      const int64_t* p = o.terms + 4 * t;
      sum += o.coefficients[t] * (power_of(x0, p[1]) * power_of(x1, p[2]) * power_of(x2, p[3]));
    }
    y[idx] = sum;
  }
};

}  // namespace mlip::kernels
