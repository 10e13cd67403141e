// tanh_net's device kernel (mlip/ops/radial_net.h), one row each, for the host and the device
// (device_kernels.h): the net's value and dy/dx carried through every layer in the thread's own
// arrays, so that nothing of size rows x width but the outputs is written (the ATen formulation
// keeps five such arrays per layer). The forward without saved values: MD and evaluation; training
// keeps the ATen formulation, whose values its backward reads.
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

// y[e, :] and dy/dx[e, :] of the last layer; elements (E).
template <typename T> struct TanhNetForward {
  static constexpr Kernel id = Kernel::TanhNetForward;
  TanhNetArgs<T> o;
  T *y, *y_dx;   // (E, M)

  MLIP_HD void operator()(int64_t e) const {
    T v[2][kTanhNetMaxWidth], d[2][kTanhNetMaxWidth];
    v[0][0] = o.x[e];
    d[0][0] = T(1);
    int cur = 0;
    for (int l = 0; l < o.layers; ++l) {
      layer(l, v[cur], d[cur], v[1 - cur], d[1 - cur]);
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
  MLIP_HD void layer(int l, const T* yv, const T* yd, T* nv, T* nd) const {
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
        nv[j] = (r == 0 ? T(0) : yv[k]) + a;
        nd[j] = (r == 0 ? T(0) : yd[k]) + (T(1) - a * a) * zd[t];
      }
    }
  }
};

}  // namespace mlip::kernels
