// vector_polynomials' device kernel (mlip/ops/vector_polynomials.h), for the host and the device
// (device_kernels.h): one row each.
#pragma once

#include <cstdint>

#include "device_kernels.h"

namespace mlip::kernels {

// The highest power of a component (MACE's harmonics need max_ell).
constexpr int64_t kMaxPolynomialPower = 15;

template <typename T> struct PolynomialArgs {
  using value_type = T;
  const T* u;               // (E, 3)
  const int64_t* terms;     // (T, 4): output, powers of u's three components
  const T* coefficients;    // (T,)
  int64_t n_terms, n, top;  // terms, outputs per row, the highest power
};

// y[e, :] = the polynomials at u[e]: the powers of its components once, then the terms.
template <typename T> struct PolynomialForward {
  static constexpr Kernel id = Kernel::PolynomialForward;
  PolynomialArgs<T> o;
  T* y;
  MLIP_HD void operator()(int64_t e) const {
    T p[3][kMaxPolynomialPower + 1];
    for (int c = 0; c < 3; ++c) {
      p[c][0] = T(1);
      for (int64_t k = 1; k <= o.top; ++k) p[c][k] = p[c][k - 1] * o.u[3 * e + c];
    }
    T* ye = y + e * o.n;
    for (int64_t i = 0; i < o.n; ++i) ye[i] = T(0);
    for (int64_t t = 0; t < o.n_terms; ++t) {
      const int64_t* q = o.terms + 4 * t;
      ye[q[0]] += o.coefficients[t] * (p[0][q[1]] * p[1][q[2]] * p[2][q[3]]);
    }
  }
};

// gu[e, :] = sum_t coefficient_t g[e, output_t] grad(monomial_t)(u[e]): d[c][k] = k u_c^(k - 1).
template <typename T> struct PolynomialGrad {
  static constexpr Kernel id = Kernel::PolynomialGrad;
  PolynomialArgs<T> o;
  const T* g;  // (E, n)
  T* gu;       // (E, 3)
  MLIP_HD void operator()(int64_t e) const {
    T p[3][kMaxPolynomialPower + 1], d[3][kMaxPolynomialPower + 1];
    for (int c = 0; c < 3; ++c) {
      p[c][0] = T(1), d[c][0] = T(0);
      for (int64_t k = 1; k <= o.top; ++k) d[c][k] = T(k) * p[c][k - 1], p[c][k] = p[c][k - 1] * o.u[3 * e + c];
    }
    const T* ge = g + e * o.n;
    T s0 = T(0), s1 = T(0), s2 = T(0);
    for (int64_t t = 0; t < o.n_terms; ++t) {
      const int64_t* q = o.terms + 4 * t;
      const T w = o.coefficients[t] * ge[q[0]], a = p[0][q[1]], b = p[1][q[2]], c = p[2][q[3]];
      s0 += w * (d[0][q[1]] * b * c);
      s1 += w * (a * d[1][q[2]] * c);
      s2 += w * (a * b * d[2][q[3]]);
    }
    gu[3 * e] = s0, gu[3 * e + 1] = s1, gu[3 * e + 2] = s2;
  }
};

}  // namespace mlip::kernels
