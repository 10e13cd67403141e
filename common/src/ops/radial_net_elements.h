// tanh_net's device kernels (mlip/ops/radial_net.h), for the host and the device
// (device_kernels.h). TanhNetForward, one row each: the net's value and dy/dx carried through every
// layer in the thread's own arrays, so that nothing of size rows x width but the outputs is written
// (MD and evaluation); in training it also writes what the backward reads (each layer's input and
// its dx-derivative, its tanh and dz/dx), one kernel for the whole net where the ATen formulation
// launches about a dozen per layer. TanhNetLayerBackward, one value each: a layer's pre-activation
// gradients from its output's, the elementwise part of the reverse pass (the parameters' gradients
// are then matrix products).
#pragma once

#include <cmath>

#include "device_kernels.h"

namespace mlip::kernels {

constexpr int kTanhNetMaxLayers = 8;
// 4 x 128 values a thread (4 KiB in float64): the GPU's local memory for every resident thread,
// about 1 GiB on an H100 outside LibTorch's allocator; wider nets take the ATen formulation.
constexpr int kTanhNetMaxWidth = 128;

template <typename T> struct TanhNetArgs {
  using value_type = T;
  const T* x;                                   // (E) inputs
  int layers;
  const T* w[kTanhNetMaxLayers];                // (in_l, out_l) row-major
  const T* b[kTanhNetMaxLayers];                // (out_l)
  int in[kTanhNetMaxLayers], out[kTanhNetMaxLayers], residual[kTanhNetMaxLayers];
};

// What training keeps of each layer l (all null in MD): inputs (2 E, in_l), rows [0, E) the
// layer's input y_l, rows [E, 2 E) its dy_l/dx (so that a layer's weight gradient is one matrix
// product); tanh (E, out_l) and dz_l/dx (E, out_l), z_l = y_l W_l + b_l.
template <typename T> struct TanhNetSaved {
  int64_t rows;
  T* inputs[kTanhNetMaxLayers];
  T* tanh[kTanhNetMaxLayers];
  T* z_dx[kTanhNetMaxLayers];
};

// y[e, :] and dy/dx[e, :] of the last layer; elements (E).
template <typename T> struct TanhNetForward {
  static constexpr Kernel id = Kernel::TanhNetForward;
  TanhNetArgs<T> o;
  T *y, *y_dx;   // (E, M)
  TanhNetSaved<T> saved;   // inputs[0] null: nothing kept

  MLIP_HD void operator()(int64_t e) const {
    T v[2][kTanhNetMaxWidth], d[2][kTanhNetMaxWidth];
    v[0][0] = o.x[e];
    d[0][0] = T(1);
    int cur = 0;
    for (int l = 0; l < o.layers; ++l) {
      if (saved.inputs[0] != nullptr) keep_input(l, e, v[cur], d[cur]);
      layer(l, e, v[cur], d[cur], v[1 - cur], d[1 - cur]);
      cur = 1 - cur;
    }
    const int m = o.out[o.layers - 1];
    for (int j = 0; j < m; ++j) {
      y[e * m + j] = v[cur][j];
      y_dx[e * m + j] = d[cur][j];
    }
  }

  // y' = R(y) + tanh(y W + b) and its derivative, R: none, y, or [y, y]. Outputs in tiles of
  // kTile, their sums in registers, so that each input is read from the thread's array once a
  // tile, not once an output (on a GPU those arrays live in local memory); each sum still adds its
  // inputs in order (where a compiler fuses multiply-adds, it may round differently).
  MLIP_HD void keep_input(int l, int64_t e, const T* yv, const T* yd) const {
    const int in = o.in[l];
    T* rows = saved.inputs[l];
    for (int i = 0; i < in; ++i) {
      rows[e * in + i] = yv[i];
      rows[(saved.rows + e) * in + i] = yd[i];
    }
  }

  MLIP_HD void layer(int l, int64_t e, const T* yv, const T* yd, T* nv, T* nd) const {
    constexpr int kTile = 8;
    const int in = o.in[l], out = o.out[l], r = o.residual[l];
    const T *w = o.w[l], *b = o.b[l];
    for (int j0 = 0; j0 < out; j0 += kTile) {
      const int n = out - j0 < kTile ? out - j0 : kTile;
      T z[kTile], zd[kTile];
      for (int t = 0; t < kTile; ++t) z[t] = t < n ? b[j0 + t] : T(0), zd[t] = T(0);
      for (int i = 0; i < in; ++i) {
        const T vi = yv[i], di = yd[i];
        const T* wi = w + i * out + j0;
        for (int t = 0; t < kTile; ++t)
          if (t < n) z[t] += vi * wi[t], zd[t] += di * wi[t];
      }
      for (int t = 0; t < n; ++t) {
        const int j = j0 + t, k = j < in ? j : j - in;
        const T a = std::tanh(z[t]);
        if (saved.inputs[0] != nullptr) {
          saved.tanh[l][e * out + j] = a;
          saved.z_dx[l][e * out + j] = zd[t];
        }
        nv[j] = (r == 0 ? T(0) : yv[k]) + a;
        nd[j] = (r == 0 ? T(0) : yd[k]) + (T(1) - a * a) * zd[t];
      }
    }
  }
};

// One layer's reverse pass, elementwise: from the gradients of its output y' = R(y) + a and of
// dy'/dx = R(dy/dx) + (1 - a^2) dz/dx, given stacked (2 E, out) as [g_y; g_yd], the gradients of z
// and dz/dx, stacked the same way into g_z (2 E, out):
//   g_zd = g_yd (1 - a^2),  g_z = (g_y - 2 g_yd a dz/dx) (1 - a^2).
// Elements (E out).
template <typename T> struct TanhNetLayerArgs {
  using value_type = T;
  const T *g_out, *tanh, *z_dx;   // (2 E, out), (E, out), (E, out)
  int64_t values;                 // E out
};

template <typename T> struct TanhNetLayerBackward {
  static constexpr Kernel id = Kernel::TanhNetLayerBackward;
  TanhNetLayerArgs<T> o;
  T* g_z;   // (2 E, out)

  MLIP_HD void operator()(int64_t k) const {
    const T a = o.tanh[k], s = T(1) - a * a, g_yd = o.g_out[o.values + k];
    g_z[k] = (o.g_out[k] - T(2) * g_yd * a * o.z_dx[k]) * s;
    g_z[o.values + k] = g_yd * s;
  }
};

}  // namespace mlip::kernels
