// equivariant_message's device kernels (mlip/ops/equivariant_message.h), one element each, for
// the host and the device (device_kernels.h). Memory: the operands, the outputs and index tables
// of size edges, nothing of size edges x paths x channels beyond w itself.
#pragma once

#include "device_kernels.h"

namespace mlip::kernels {

// The operands (rows of contiguous arrays) and the index tables, on the kernels' device.
template <typename T> struct MessageArgs {
  using value_type = T;
  int64_t a, c, k, p;                       // components, channels, outputs, paths
  const T *x, *s, *w;                       // (N, A, C), (E, A, K), (E, P, C)
  const T* g;                               // the incoming gradient (n_out, K, C) (the backward)
  const int64_t *path, *center, *neighbor;  // (K,), (E,), (E,)
  // Edges of centre c in edge order: by_center[center_first[c] .. center_first[c + 1]); of
  // neighbour j: by_neighbor[neighbor_first[j] ..]; outputs of path p: by_path[path_first[p] ..].
  const int64_t *by_center, *center_first, *by_neighbor, *neighbor_first, *by_path, *path_first;
};

// msg[c, k, u] = sum_{e: center[e] = c} w[e, path[k], u] sum_a s[e, a, k] x[neighbor[e], a, u];
// elements (n_out, K, C).
template <typename T> struct MessageForward {
  static constexpr Kernel id = Kernel::MessageForward;
  MessageArgs<T> o;
  T* msg;
  MLIP_HD void operator()(int64_t i) const {
    const int64_t u = i % o.c, k = i / o.c % o.k, c = i / (o.c * o.k);
    T sum = 0;
    for (int64_t f = o.center_first[c]; f < o.center_first[c + 1]; ++f) {
      const int64_t e = o.by_center[f];
      const T* xj = o.x + o.neighbor[e] * o.a * o.c + u;
      const T* se = o.s + e * o.a * o.k + k;
      T m = 0;
      for (int64_t a = 0; a < o.a; ++a) m += se[a * o.k] * xj[a * o.c];
      sum += o.w[(e * o.p + o.path[k]) * o.c + u] * m;
    }
    msg[i] = sum;
  }
};

// gx[j, a, u] = sum_{e: neighbor[e] = j} sum_k s[e, a, k] g[center[e], k, u] w[e, path[k], u];
// elements (N, A, C).
template <typename T> struct MessageGradX {
  static constexpr Kernel id = Kernel::MessageGradX;
  MessageArgs<T> o;
  T* gx;
  MLIP_HD void operator()(int64_t i) const {
    const int64_t u = i % o.c, a = i / o.c % o.a, j = i / (o.c * o.a);
    T sum = 0;
    for (int64_t f = o.neighbor_first[j]; f < o.neighbor_first[j + 1]; ++f) {
      const int64_t e = o.by_neighbor[f];
      const T* gc = o.g + o.center[e] * o.k * o.c + u;
      const T* sea = o.s + (e * o.a + a) * o.k;
      const T* we = o.w + e * o.p * o.c + u;
      for (int64_t k = 0; k < o.k; ++k) sum += sea[k] * (gc[k * o.c] * we[o.path[k] * o.c]);
    }
    gx[i] = sum;
  }
};

// gs[e, a, k] = sum_u g[center[e], k, u] w[e, path[k], u] x[neighbor[e], a, u]; elements (E, A, K).
template <typename T> struct MessageGradS {
  static constexpr Kernel id = Kernel::MessageGradS;
  MessageArgs<T> o;
  T* gs;
  MLIP_HD void operator()(int64_t i) const {
    const int64_t k = i % o.k, a = i / o.k % o.a, e = i / (o.k * o.a);
    const T* gk = o.g + (o.center[e] * o.k + k) * o.c;
    const T* wk = o.w + (e * o.p + o.path[k]) * o.c;
    const T* xa = o.x + (o.neighbor[e] * o.a + a) * o.c;
    T sum = 0;
    for (int64_t u = 0; u < o.c; ++u) sum += gk[u] * wk[u] * xa[u];
    gs[i] = sum;
  }
};

// gw[e, p, u] = sum_{k: path[k] = p} g[center[e], k, u] sum_a s[e, a, k] x[neighbor[e], a, u];
// elements (E, P, C).
template <typename T> struct MessageGradW {
  static constexpr Kernel id = Kernel::MessageGradW;
  MessageArgs<T> o;
  T* gw;
  MLIP_HD void operator()(int64_t i) const {
    const int64_t u = i % o.c, p = i / o.c % o.p, e = i / (o.c * o.p);
    const T* gc = o.g + o.center[e] * o.k * o.c + u;
    const T* xj = o.x + o.neighbor[e] * o.a * o.c + u;
    const T* se = o.s + e * o.a * o.k;
    T sum = 0;
    for (int64_t f = o.path_first[p]; f < o.path_first[p + 1]; ++f) {
      const int64_t k = o.by_path[f];
      T m = 0;
      for (int64_t a = 0; a < o.a; ++a) m += se[a * o.k + k] * xj[a * o.c];
      sum += gc[k * o.c] * m;
    }
    gw[i] = sum;
  }
};

}  // namespace mlip::kernels
