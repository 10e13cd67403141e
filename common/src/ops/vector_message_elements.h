// vector_message's device kernels (mlip/ops/vector_message.h), one element each, for the host and
// the device (device_kernels.h): the forward and the gradients MD takes (a graph asked for, as a
// force loss in training does, differentiates the aten formulation).
#pragma once

#include "device_kernels.h"

namespace mlip::kernels {

// The operands (rows of contiguous arrays) and the index tables, on the kernels' device.
template <typename T> struct VectorArgs {
  using value_type = T;
  int64_t f;                                // features F
  const T *phi, *w, *v, *unit;              // (N, 3F), (E, 3F), (N, 3, F), (E, 3)
  const T *gs, *gv;                         // incoming gradients (n_out, F), (n_out, 3, F)
  const int64_t *center, *neighbor;         // (E,)
  // Edges of centre c in edge order: by_center[center_first[c] .. center_first[c + 1]); of
  // neighbour j: by_neighbor[neighbor_first[j] ..].
  const int64_t *by_center, *center_first, *by_neighbor, *neighbor_first;

  // sum_k gv[c, k, i] v[j, k, i] and sum_k gv[c, k, i] unit[e, k] of edge e.
  MLIP_HD T gv_dot_v(int64_t e, int64_t i) const {
    const T *g = gv + center[e] * 3 * f + i, *vj = v + neighbor[e] * 3 * f + i;
    return g[0] * vj[0] + g[f] * vj[f] + g[2 * f] * vj[2 * f];
  }
  MLIP_HD T gv_dot_unit(int64_t e, int64_t i) const {
    const T* g = gv + center[e] * 3 * f + i;
    return g[0] * unit[3 * e] + g[f] * unit[3 * e + 1] + g[2 * f] * unit[3 * e + 2];
  }
  // The gradient of edge e's message x_e (3F) at column q F + i.
  MLIP_HD T message_gradient(int64_t e, int64_t q, int64_t i) const {
    return q == 0 ? gs[center[e] * f + i] : q == 1 ? gv_dot_v(e, i) : gv_dot_unit(e, i);
  }
};

// ds[c, i] = sum_{e of c} phi[j, i] w[e, i]; elements (n_out, F).
template <typename T> struct VectorForwardS {
  static constexpr Kernel id = Kernel::VectorForwardS;
  VectorArgs<T> o;
  T* ds;
  MLIP_HD void operator()(int64_t idx) const {
    const int64_t f = o.f, i = idx % f, c = idx / f;
    T sum = 0;
    for (int64_t k = o.center_first[c]; k < o.center_first[c + 1]; ++k) {
      const int64_t e = o.by_center[k];
      sum += o.phi[o.neighbor[e] * 3 * f + i] * o.w[e * 3 * f + i];
    }
    ds[idx] = sum;
  }
};

// dv[c, d, i] = sum_{e of c} v[j, d, i] phi[j, F + i] w[e, F + i] + unit[e, d] phi[j, 2F + i] w[e, 2F + i];
// elements (n_out, 3, F).
template <typename T> struct VectorForwardV {
  static constexpr Kernel id = Kernel::VectorForwardV;
  VectorArgs<T> o;
  T* dv;
  MLIP_HD void operator()(int64_t idx) const {
    const int64_t f = o.f, i = idx % f, d = idx / f % 3, c = idx / (3 * f);
    T sum = 0;
    for (int64_t k = o.center_first[c]; k < o.center_first[c + 1]; ++k) {
      const int64_t e = o.by_center[k], j = o.neighbor[e];
      const T* p = o.phi + j * 3 * f + i;
      const T* we = o.w + e * 3 * f + i;
      sum += o.v[(j * 3 + d) * f + i] * (p[f] * we[f]) + o.unit[3 * e + d] * (p[2 * f] * we[2 * f]);
    }
    dv[idx] = sum;
  }
};

// gphi[j, q F + i] = sum_{e: neighbor[e] = j} (the gradient of x_e) w[e, q F + i]; elements (N, 3F).
template <typename T> struct VectorGradPhi {
  static constexpr Kernel id = Kernel::VectorGradPhi;
  VectorArgs<T> o;
  T* gphi;
  MLIP_HD void operator()(int64_t idx) const {
    const int64_t f = o.f, col = idx % (3 * f), q = col / f, i = col % f, j = idx / (3 * f);
    T sum = 0;
    for (int64_t k = o.neighbor_first[j]; k < o.neighbor_first[j + 1]; ++k) {
      const int64_t e = o.by_neighbor[k];
      sum += o.message_gradient(e, q, i) * o.w[e * 3 * f + col];
    }
    gphi[idx] = sum;
  }
};

// gw[e, q F + i] = (the gradient of x_e) phi[j, q F + i]; elements (E, 3F).
template <typename T> struct VectorGradW {
  static constexpr Kernel id = Kernel::VectorGradW;
  VectorArgs<T> o;
  T* gw;
  MLIP_HD void operator()(int64_t idx) const {
    const int64_t f = o.f, col = idx % (3 * f), e = idx / (3 * f);
    gw[idx] = o.message_gradient(e, col / f, col % f) * o.phi[o.neighbor[e] * 3 * f + col];
  }
};

// gv_in[j, d, i] = sum_{e: neighbor[e] = j} gv[c, d, i] phi[j, F + i] w[e, F + i]; elements (N, 3, F).
template <typename T> struct VectorGradV {
  static constexpr Kernel id = Kernel::VectorGradV;
  VectorArgs<T> o;
  T* gvin;
  MLIP_HD void operator()(int64_t idx) const {
    const int64_t f = o.f, i = idx % f, d = idx / f % 3, j = idx / (3 * f);
    const T pj = o.phi[j * 3 * f + f + i];
    T sum = 0;
    for (int64_t k = o.neighbor_first[j]; k < o.neighbor_first[j + 1]; ++k) {
      const int64_t e = o.by_neighbor[k];
      sum += o.gv[(o.center[e] * 3 + d) * f + i] * (pj * o.w[e * 3 * f + f + i]);
    }
    gvin[idx] = sum;
  }
};

// gunit[e, d] = sum_i gv[c, d, i] phi[j, 2F + i] w[e, 2F + i]; elements (E, 3).
template <typename T> struct VectorGradUnit {
  static constexpr Kernel id = Kernel::VectorGradUnit;
  VectorArgs<T> o;
  T* gunit;
  MLIP_HD void operator()(int64_t idx) const {
    const int64_t f = o.f, d = idx % 3, e = idx / 3;
    const T* g = o.gv + (o.center[e] * 3 + d) * f;
    const T* p = o.phi + o.neighbor[e] * 3 * f + 2 * f;
    const T* we = o.w + e * 3 * f + 2 * f;
    T sum = 0;
    for (int64_t i = 0; i < f; ++i) sum += g[i] * (p[i] * we[i]);
    gunit[idx] = sum;
  }
};

}  // namespace mlip::kernels
