// se_environment's per-edge logic (mlip/ops/se_environment.h), written once: generic over the value
// type T and its scalars S, so that the device kernels (T = S = float or double, one edge per
// element, on the host and the device: device_kernels.h) and the ATen formulation (T = a tensor of
// every edge's value, S = double: differentiable by autograd, the third and higher derivatives)
// evaluate the same expressions. Plain C++ (read by nvcc too): the templates use +, -, * and /
// only; the functors (device kernels only) also sqrt and comparisons.
//
// Per edge, with v the edge vector, r = |v|, u = clamp((r - rs) / (rc - rs), 0, 1) and the switch
// sw(u) = u^3 (-6 u^2 + 15 u - 10) + 1:
//   f(r) = sw / r,  q(r) = f / r,
//   radial = (f - avg) / std_r,  angular = q v / std_a  (env = [radial, angular]).
// With phi = f'/r and psi = q'/r, the gradient of <g, env> (g0: radial's and env[0]'s, g the
// angular three) is
//   gv = v (g0 phi / std_r + psi (g.v) / std_a) + q g / std_a,
// and the derivatives of <h, gv>: along g0, phi (v.h) / std_r; along g, (psi v (v.h) + q h) / std_a;
// along v,
//   h A + (v.h) (B v + psi g / std_a) + psi (g.h) v / std_a,
//   A = g0 phi / std_r + psi (g.v) / std_a,  B = (g0 phi' / std_r + psi' (g.v) / std_a) / r.
// sw' and sw'' vanish at u = 0 and u = 1, so the clamp's ends need no case of their own.
#pragma once

#include <cmath>
#include <cstdint>

#include "device_kernels.h"

namespace mlip::kernels {

template <typename T> struct EnvTerms {
  T ir, f, q, phi, psi, phi1, psi1;   // 1/r, f, q, f'/r, q'/r and the derivatives of the last two in r
};

// The radial functions at u (clamped) and ir = 1 / r; k = 1 / (rc - rs).
template <typename T, typename S> MLIP_HD EnvTerms<T> env_terms(const T& u, const T& ir, S k) {
  const T sw = u * u * u * (S(-6) * u * u + S(15) * u - S(10)) + S(1);
  const T d1 = S(-30) * k * u * u * (u - S(1)) * (u - S(1));           // dsw/dr
  const T d2 = S(-60) * k * k * u * (S(2) * u - S(1)) * (u - S(1));   // d2sw/dr2
  const T f = sw * ir, f1 = (d1 - f) * ir, f2 = (d2 - S(2) * f1) * ir;
  const T q = f * ir, q1 = (f1 - q) * ir, q2 = (f2 - S(2) * q1) * ir;
  const T phi = f1 * ir, psi = q1 * ir;
  return {ir, f, q, phi, psi, (f2 - phi) * ir, (q2 - psi) * ir};
}

// gv (3) from the edge's v (3), terms e, 1/std_r cr, 1/std_a ca and the incoming g0, g (3).
template <typename T> MLIP_HD void env_gradient(const T* v, const EnvTerms<T>& e, const T& cr, const T& ca, const T& g0,
                                                const T* g, T* gv) {
  const T gdotv = g[0] * v[0] + g[1] * v[1] + g[2] * v[2];
  const T a = g0 * e.phi * cr + e.psi * gdotv * ca, b = e.q * ca;
  for (int c = 0; c < 3; ++c) gv[c] = v[c] * a + b * g[c];
}

// The derivatives of <h, gv> along g0 (d0), g (dg, 3) and v (dv, 3).
template <typename T> MLIP_HD void env_second(const T* v, const EnvTerms<T>& e, const T& cr, const T& ca, const T& g0,
                                              const T* g, const T* h, T& d0, T* dg, T* dv) {
  const T vh = v[0] * h[0] + v[1] * h[1] + v[2] * h[2];
  const T gv = g[0] * v[0] + g[1] * v[1] + g[2] * v[2];
  const T gh = g[0] * h[0] + g[1] * h[1] + g[2] * h[2];
  const T pg = e.psi * ca;
  d0 = e.phi * vh * cr;
  for (int c = 0; c < 3; ++c) dg[c] = pg * v[c] * vh + e.q * ca * h[c];
  const T a = g0 * e.phi * cr + pg * gv, b = (g0 * e.phi1 * cr + e.psi1 * gv * ca) * e.ir;
  for (int c = 0; c < 3; ++c) dv[c] = h[c] * a + vh * (b * v[c] + pg * g[c]) + pg * gh * v[c];
}

// sqrt on the device and the host
template <typename T> MLIP_HD T sqrt_of(T x) {
#if defined(__CUDA_ARCH__)
  return sqrt(x);
#else
  return std::sqrt(x);
#endif
}

template <typename T> struct EnvArgs {
  using value_type = T;
  const T* v;     // (E, 3)
  const T* avg;   // (E) the radial shift of each edge's centre species, or nullptr (none)
  const T* std;   // (E, 2) [std_r, std_a] of each edge's centre species
  const T *g_radial, *g_env, *h;   // (E), (E, 4), (E, 3): the incoming gradients, the direction (second)
  T rs, rc;
};

// u and 1/r of edge i
template <typename T> MLIP_HD void env_distance(const EnvArgs<T>& o, int64_t i, T& u, T& ir) {
  const T* v = o.v + 3 * i;
  const T r = sqrt_of(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
  u = (r - o.rs) / (o.rc - o.rs);
  u = u < T(0) ? T(0) : u > T(1) ? T(1) : u;
  ir = T(1) / r;
}

// radial (E) and env (E, 4)
template <typename T> struct EnvForward {
  static constexpr Kernel id = Kernel::EnvForward;
  EnvArgs<T> o;
  T *radial, *env;
  MLIP_HD void operator()(int64_t i) const {
    T u, ir;
    env_distance(o, i, u, ir);
    const EnvTerms<T> e = env_terms(u, ir, T(1) / (o.rc - o.rs));
    const T rad = (e.f - (o.avg ? o.avg[i] : T(0))) / o.std[2 * i];
    const T qa = e.q / o.std[2 * i + 1];
    radial[i] = rad;
    env[4 * i] = rad;
    for (int c = 0; c < 3; ++c) env[4 * i + 1 + c] = qa * o.v[3 * i + c];
  }
};

// gv (E, 3) from g_radial and g_env
template <typename T> struct EnvBackward {
  static constexpr Kernel id = Kernel::EnvBackward;
  EnvArgs<T> o;
  T* gv;
  MLIP_HD void operator()(int64_t i) const {
    T u, ir;
    env_distance(o, i, u, ir);
    const EnvTerms<T> e = env_terms(u, ir, T(1) / (o.rc - o.rs));
    env_gradient(o.v + 3 * i, e, T(1) / o.std[2 * i], T(1) / o.std[2 * i + 1], o.g_radial[i] + o.g_env[4 * i],
                 o.g_env + 4 * i + 1, gv + 3 * i);
  }
};

// The derivatives of <h, gv>: d_radial (E; also env[0]'s), d_env (E, 4) and d_v (E, 3)
template <typename T> struct EnvSecond {
  static constexpr Kernel id = Kernel::EnvSecond;
  EnvArgs<T> o;
  T *d_radial, *d_env, *d_v;
  MLIP_HD void operator()(int64_t i) const {
    T u, ir;
    env_distance(o, i, u, ir);
    const EnvTerms<T> e = env_terms(u, ir, T(1) / (o.rc - o.rs));
    T d0;
    env_second(o.v + 3 * i, e, T(1) / o.std[2 * i], T(1) / o.std[2 * i + 1], o.g_radial[i] + o.g_env[4 * i],
               o.g_env + 4 * i + 1, o.h + 3 * i, d0, d_env + 4 * i + 1, d_v + 3 * i);
    d_radial[i] = d0;
    d_env[4 * i] = d0;
  }
};

}  // namespace mlip::kernels
