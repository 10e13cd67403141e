// tabulated_contraction's device kernels (mlip/ops/tabulated_embedding.h), for the host and the
// device (device_kernels.h): each thread evaluates its edges' quintics in registers; nothing of
// size edges x M is stored.
#pragma once

#include "device_kernels.h"

namespace mlip::kernels {

constexpr int64_t kTableCoefficients = 6;   // quintic

// The bin of x and the offset in it (the CPU kernels' locate, tabulated_embedding.cpp).
template <typename T> struct Bin {
  int64_t k;
  T t;
};
template <typename T> MLIP_HD Bin<T> locate_bin(T x, double inv_step, int64_t n_bins) {
  const double u = static_cast<double>(x) * inv_step;
  // clamped before the conversion (past int64's range, or NaN, it is undefined on the host): the
  // first bin below the table (rounding: -1 < u < 0), the last at its top end and beyond
  const int64_t k = u < 1.0 ? 0 : !(u < static_cast<double>(n_bins)) ? n_bins - 1 : static_cast<int64_t>(u);
  return {k, static_cast<T>(u - static_cast<double>(k))};
}

template <typename T> struct TableArgs {
  using value_type = T;
  int64_t n_bins, m;                   // bins, columns M
  double inv_step;
  const T *x, *env, *table, *grad;     // (E,), (E, 4), (nets, bins, 6, M), incoming (n_centers, 4, M)
  const int64_t *center, *net;         // (E,)
  const int64_t *by_center, *center_first;  // edges of centre c: by_center[center_first[c] .. center_first[c + 1])

  // Edge e's bin: its 6 x M coefficients (column mm's at + mm, stride M), t in the bin.
  MLIP_HD const T* bin_row(int64_t e, T* t) const {
    const Bin<T> b = locate_bin(x[e], inv_step, n_bins);
    *t = b.t;
    return table + (net[e] * n_bins + b.k) * kTableCoefficients * m;
  }
  MLIP_HD T value(const T* c, T t) const {
    return c[0] + t * (c[m] + t * (c[2 * m] + t * (c[3 * m] + t * (c[4 * m] + t * c[5 * m]))));
  }
  MLIP_HD T slope(const T* c, T t) const {
    return static_cast<T>(inv_step) *
           (c[m] + t * (2 * c[2 * m] + t * (3 * c[3 * m] + t * (4 * c[4 * m] + t * 5 * c[5 * m]))));
  }
};

// out[c, a, mm] = sum_{e of c} env[e, a] G(x_e)[mm] for a = 0..3; elements (n_centers, S), S =
// threads_per_center(M): thread j of centre c sums columns j, j + S, j + 2 S, ... (kColumns of
// them), so that an edge's bin (double arithmetic, slow on most GPUs) is found once for them, not
// once a column; a warp's threads read neighbouring columns of a row (coalesced).
template <typename T> struct TabulatedForward {
  static constexpr Kernel id = Kernel::TabulatedForward;
  static constexpr int kColumns = 4;
  TableArgs<T> o;
  T* out;
  static MLIP_HD int64_t threads_per_center(int64_t m) { return (m + kColumns - 1) / kColumns; }
  MLIP_HD void operator()(int64_t i) const {
    const int64_t stride = threads_per_center(o.m), first = i % stride, c = i / stride;
    T s[kColumns][4] = {};
    for (int64_t k = o.center_first[c]; k < o.center_first[c + 1]; ++k) {
      const int64_t e = o.by_center[k];
      T t;
      const T* row = o.bin_row(e, &t);   // sets t first
      const T w0 = o.env[4 * e], w1 = o.env[4 * e + 1], w2 = o.env[4 * e + 2], w3 = o.env[4 * e + 3];
      for (int j = 0; j < kColumns; ++j) {
        const int64_t mm = first + j * stride;
        if (mm < o.m) {   // (a test, not a break: the loop unrolls, s stays in registers)
          const T g = o.value(row + mm, t);
          s[j][0] += w0 * g, s[j][1] += w1 * g, s[j][2] += w2 * g, s[j][3] += w3 * g;
        }
      }
    }
    for (int j = 0; j < kColumns; ++j) {
      const int64_t mm = first + j * stride;
      if (mm < o.m) {
        T* at = out + c * 4 * o.m + mm;
        at[0] = s[j][0], at[o.m] = s[j][1], at[2 * o.m] = s[j][2], at[3 * o.m] = s[j][3];
      }
    }
  }
};

// grad_env[e, a] = sum_mm grad[c, a, mm] G_mm, grad_x[e] = sum_mm (sum_a env[e, a] grad[c, a, mm]) G'_mm;
// elements (E,).
template <typename T> struct TabulatedBackward {
  static constexpr Kernel id = Kernel::TabulatedBackward;
  TableArgs<T> o;
  T *grad_x, *grad_env;
  MLIP_HD void operator()(int64_t e) const {
    const T* d = o.grad + o.center[e] * 4 * o.m;
    const T* w = o.env + 4 * e;
    T e0 = 0, e1 = 0, e2 = 0, e3 = 0, dx = 0;
    T t;
    const T* row = o.bin_row(e, &t);   // located once, not once a column (double arithmetic)
    for (int64_t mm = 0; mm < o.m; ++mm) {
      const T* c = row + mm;
      const T g = o.value(c, t), gp = o.slope(c, t);
      const T d0 = d[mm], d1 = d[o.m + mm], d2 = d[2 * o.m + mm], d3 = d[3 * o.m + mm];
      e0 += d0 * g, e1 += d1 * g, e2 += d2 * g, e3 += d3 * g;
      dx += (w[0] * d0 + w[1] * d1 + w[2] * d2 + w[3] * d3) * gp;
    }
    grad_env[4 * e] = e0, grad_env[4 * e + 1] = e1, grad_env[4 * e + 2] = e2, grad_env[4 * e + 3] = e3;
    grad_x[e] = dx;
  }
};

}  // namespace mlip::kernels
