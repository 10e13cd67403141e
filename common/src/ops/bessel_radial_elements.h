// bessel_radial's device kernels (mlip/ops/bessel_radial.h), for the host and the device
// (device_kernels.h): one edge (row) each.
#pragma once

#include <cmath>
#include <cstdint>

#include "device_kernels.h"

namespace mlip::kernels {

// The highest derivative order the kernels take (the forward's; the gradient's is one more).
constexpr int64_t kMaxBesselOrder = 6;

template <typename T> struct BesselArgs {
  using value_type = T;
  const T* r;              // (E,) distances
  const T* k;              // (nb,) frequencies; harmonic: k[n] = (n + 1) k[0], only k[0] read
  int64_t nb, p, order;    // basis size, the envelope's order (0: none), the forward's derivative order
  T cutoff, scale;         // r_max, sqrt(2 / r_max)
  bool harmonic;
};

template <typename T> MLIP_HD void sin_cos(T x, T& s, T& c) {
#if defined(__CUDA_ARCH__)
  s = sin(x), c = cos(x);
#else
  s = std::sin(x), c = std::cos(x);
#endif
}

// w[j] = d^j/dr^j (scale / r x envelope(r / cutoff)), j = 0..m, by Leibniz's rule: (1/r)'s
// derivatives (-1)^b b! / r^(b+1) and the envelope polynomial's
// 1 - (p+1)(p+2)/2 u^p + p(p+2) u^(p+1) - p(p+1)/2 u^(p+2). False at and past the cutoff (the
// envelope times the step r < cutoff: zero with all its derivatives there).
template <typename T> MLIP_HD bool radial_factor(const BesselArgs<T>& o, T r, int64_t m, T* w) {
  if (o.p > 0 && !(r < o.cutoff)) return false;
  T q[kMaxBesselOrder + 2], env[kMaxBesselOrder + 2];
  const T inv = T(1) / r;
  q[0] = o.scale * inv;
  env[0] = T(1);
  for (int64_t b = 1; b <= m; ++b) q[b] = -T(b) * q[b - 1] * inv, env[b] = T(0);
  if (o.p > 0) {
    const T pp = T(o.p), u = r / o.cutoff;
    const T coefficient[3] = {-(pp + 1) * (pp + 2) / 2, pp * (pp + 2), -pp * (pp + 1) / 2};
    for (int64_t t = 0; t < 3; ++t) {
      const int64_t power = o.p + t;
      T factor = coefficient[t];  // power! / (power - j)! / cutoff^j
      for (int64_t j = 0; j <= m && j <= power; ++j) {
        T x = factor;
        for (int64_t i = 0; i < power - j; ++i) x *= u;
        env[j] += x;
        factor *= T(power - j) / o.cutoff;
      }
    }
  }
  for (int64_t j = 0; j <= m; ++j) {
    T binomial = T(1), s = T(0);
    for (int64_t b = 0; b <= j; ++b) {
      s += binomial * q[b] * env[j - b];
      binomial = binomial * T(j - b) / T(b + 1);
    }
    w[j] = s;
  }
  return true;
}

// d^m/dr^m [sin(k r) w(r)] = sum_a C(m, a) k^a sin(k r + a pi / 2) w^(m - a), with s, c = sin, cos(k r).
template <typename T> MLIP_HD T bessel_derivative(T k, T s, T c, const T* w, int64_t m) {
  T sum = T(0), binomial = T(1), ka = T(1);
  for (int64_t a = 0; a <= m; ++a) {
    const T trig = (a & 1) ? ((a & 2) ? -c : c) : ((a & 2) ? -s : s);
    sum += binomial * ka * trig * w[m - a];
    binomial = binomial * T(m - a) / T(a + 1);
    ka *= k;
  }
  return sum;
}

// f(n, value) for the basis functions' m-th derivatives at r (nothing past the cutoff): harmonic
// frequencies by the angle-addition recurrence (one sine and cosine per edge), else each its own.
template <typename T, class F> MLIP_HD bool each_bessel(const BesselArgs<T>& o, T r, int64_t m, F f) {
  T w[kMaxBesselOrder + 2];
  if (!radial_factor(o, r, m, w)) return false;
  T s1, c1;
  sin_cos(o.k[0] * r, s1, c1);
  T s = s1, c = c1;
  for (int64_t n = 0; n < o.nb; ++n) {
    const T k = o.harmonic ? T(n + 1) * o.k[0] : o.k[n];
    if (n > 0) {
      if (o.harmonic) {
        const T sn = s * c1 + c * s1;
        c = c * c1 - s * s1, s = sn;
      } else {
        sin_cos(k * r, s, c);
      }
    }
    f(n, bessel_derivative(k, s, c, w, m));
  }
  return true;
}

// y[e, n] = d^order/dr^order of scale sin(k_n r) / r x envelope, at r[e].
template <typename T> struct BesselForward {
  static constexpr Kernel id = Kernel::BesselForward;
  BesselArgs<T> o;
  T* y;  // (E, nb)
  MLIP_HD void operator()(int64_t e) const {
    T* ye = y + e * o.nb;
    if (!each_bessel(o, o.r[e], o.order, [ye](int64_t n, T v) { ye[n] = v; }))
      for (int64_t n = 0; n < o.nb; ++n) ye[n] = T(0);
  }
};

// gr[e] = sum_n g[e, n] (the order + 1-th derivative of basis function n at r[e]).
template <typename T> struct BesselGrad {
  static constexpr Kernel id = Kernel::BesselGrad;
  BesselArgs<T> o;
  const T* g;  // (E, nb)
  T* gr;       // (E,)
  MLIP_HD void operator()(int64_t e) const {
    const T* ge = g + e * o.nb;
    T sum = T(0);
    each_bessel(o, o.r[e], o.order + 1, [ge, &sum](int64_t n, T v) { sum += ge[n] * v; });
    gr[e] = sum;
  }
};

}  // namespace mlip::kernels
