// torch.ops.mlip.symmetric_contraction: see mlip/ops/symmetric_contraction.h.
#include "mlip/ops/symmetric_contraction.h"
#include "mlip/ops/operators.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "cpu_kernels.h"
#include "device_launch.h"
#include "symmetric_contraction_elements.h"

namespace mlip {
namespace {

using torch::Tensor;
using CT = const torch::Tensor&;

template <typename T> struct Operands {
  int64_t d, c, q, m;  // components, channels, monomials, outputs
  const T *x, *z;
  const int64_t *mono, *species;
};

// x_row(i) for a node: row i of its (D, C) block, or `ones` for i == D.
template <typename T> MLIP_KERNEL const T* row(const T* xn, int64_t i, int64_t D, int64_t C, const T* ones) {
  return i == D ? ones : xn + i * C;
}

// A range of nodes [i0, i1) and of monomials [q0, q1) (a range computes exactly its part of the
// whole: the weights' gradient of monomial q sums over nodes only).
struct Range {
  int64_t i0, i1, q0, q1;
};

template <typename T> MLIP_KERNEL void contract_nodes(const Operands<T>& o, Range r, T* b, T* scratch) {
  const int64_t D = o.d, C = o.c, Q = o.q, M = o.m;
  T* ones = scratch;
  T* t = scratch + C;
  for (int64_t u = 0; u < C; ++u) ones[u] = T(1);
  for (int64_t i = r.i0; i < r.i1; ++i) {
    const T* xn = o.x + i * D * C;
    const T* zs = o.z + o.species[i] * Q * M * C;
    T* bn = b + i * M * C;
    for (int64_t q = r.q0; q < r.q1; ++q) {
      const int64_t* mq = o.mono + 3 * q;
      const T *a = row(xn, mq[0], D, C, ones), *b2 = row(xn, mq[1], D, C, ones), *c = row(xn, mq[2], D, C, ones);
#pragma omp simd
      for (int64_t u = 0; u < C; ++u) t[u] = a[u] * b2[u] * c[u];
      const T* zq = zs + q * M * C;
      for (int64_t m = 0; m < M; ++m) {
        const T* zm = zq + m * C;
        T* out = bn + m * C;
#pragma omp simd
        for (int64_t u = 0; u < C; ++u) out[u] += zm[u] * t[u];
      }
    }
  }
}

// Gradients of x (kX: per node) and of z (kZ: per species, summed over nodes in order) given g
// (n, M, C).
template <typename T, bool kX, bool kZ>
MLIP_KERNEL void gradient_nodes(const Operands<T>& o, Range r, const T* g, T* gx, T* gz, T* scratch) {
  const int64_t D = o.d, C = o.c, Q = o.q, M = o.m;
  T* ones = scratch;
  T* t = scratch + C;
  T* gt = scratch + 2 * C;
  T* sink = scratch + 3 * C;  // gradient of the constant 1: discarded
  for (int64_t u = 0; u < C; ++u) ones[u] = T(1);
  for (int64_t i = r.i0; i < r.i1; ++i) {
    const T* xn = o.x + i * D * C;
    T* gxn = gx + i * D * C;
    const T* zs = o.z + o.species[i] * Q * M * C;
    T* gzs = gz + o.species[i] * Q * M * C;
    const T* gn = g + i * M * C;
    for (int64_t q = r.q0; q < r.q1; ++q) {
      const int64_t* mq = o.mono + 3 * q;
      const T *a = row(xn, mq[0], D, C, ones), *b = row(xn, mq[1], D, C, ones), *c = row(xn, mq[2], D, C, ones);
      const T* zq = zs + q * M * C;
      T* gzq = gzs + q * M * C;
#pragma omp simd
      for (int64_t u = 0; u < C; ++u) t[u] = a[u] * b[u] * c[u], gt[u] = T(0);
      for (int64_t m = 0; m < M; ++m) {
        const T* zm = zq + m * C;
        const T* gm = gn + m * C;
        T* gzm = gzq + m * C;
#pragma omp simd
        for (int64_t u = 0; u < C; ++u) {
          if constexpr (kX) gt[u] += gm[u] * zm[u];
          if constexpr (kZ) gzm[u] += gm[u] * t[u];
        }
      }
      if constexpr (kX) {
        T* ga = mq[0] == D ? sink : gxn + mq[0] * C;
        T* gb = mq[1] == D ? sink : gxn + mq[1] * C;
        T* gc = mq[2] == D ? sink : gxn + mq[2] * C;
        // Each factor separately: a monomial may repeat a component (x_i^2), so ga and gb may alias.
#pragma omp simd
        for (int64_t u = 0; u < C; ++u) ga[u] += gt[u] * b[u] * c[u];
#pragma omp simd
        for (int64_t u = 0; u < C; ++u) gb[u] += gt[u] * a[u] * c[u];
#pragma omp simd
        for (int64_t u = 0; u < C; ++u) gc[u] += gt[u] * a[u] * b[u];
      }
    }
  }
}

// The backward of the backward along (hx, hz): with t the monomial, dt its change along hx,
// gt = sum_m g z and ht = sum_m g hz, the gradients of <hx, gx> + <hz, gz> are
//   d/dg = z dt + hz t,  d/dz = g dt,  d/dx = gt (second derivatives of t along hx) + ht (dt/dx).
// kN: dg and dx (per node); kZ: dz (per species, summed over nodes in order).
template <typename T, bool kN, bool kZ>
MLIP_KERNEL void second_nodes(const Operands<T>& o, Range r, const T* g, const T* hx, const T* hz, T* dg, T* dx,
                              T* dz, T* scratch) {
  const int64_t D = o.d, C = o.c, Q = o.q, M = o.m;
  T* ones = scratch;
  T* zeros = scratch + C;
  T* sink = scratch + 2 * C;
  T *t = scratch + 3 * C, *dt = scratch + 4 * C, *gt = scratch + 5 * C, *ht = scratch + 6 * C;
  for (int64_t u = 0; u < C; ++u) ones[u] = T(1), zeros[u] = T(0);
  for (int64_t i = r.i0; i < r.i1; ++i) {
    const T *xn = o.x + i * D * C, *hxn = hx + i * D * C;
    T* dxn = dx + i * D * C;
    const int64_t zo = o.species[i] * Q * M * C;
    const T *gn = g + i * M * C;
    T* dgn = dg + i * M * C;
    for (int64_t q = r.q0; q < r.q1; ++q) {
      const int64_t* mq = o.mono + 3 * q;
      const T *a = row(xn, mq[0], D, C, ones), *b = row(xn, mq[1], D, C, ones), *c = row(xn, mq[2], D, C, ones);
      const T *ha = row(hxn, mq[0], D, C, zeros), *hb = row(hxn, mq[1], D, C, zeros),
              *hc = row(hxn, mq[2], D, C, zeros);
      const T *zq = o.z + zo + q * M * C, *hzq = hz + zo + q * M * C;
      T* dzq = dz + zo + q * M * C;
#pragma omp simd
      for (int64_t u = 0; u < C; ++u) {
        t[u] = a[u] * b[u] * c[u];
        dt[u] = ha[u] * b[u] * c[u] + a[u] * hb[u] * c[u] + a[u] * b[u] * hc[u];
        gt[u] = T(0), ht[u] = T(0);
      }
      for (int64_t m = 0; m < M; ++m) {
        const T *zm = zq + m * C, *hzm = hzq + m * C, *gm = gn + m * C;
        T *dgm = dgn + m * C, *dzm = dzq + m * C;
#pragma omp simd
        for (int64_t u = 0; u < C; ++u) {
          if constexpr (kN) {
            gt[u] += gm[u] * zm[u];
            ht[u] += gm[u] * hzm[u];
            dgm[u] += zm[u] * dt[u] + hzm[u] * t[u];
          }
          if constexpr (kZ) dzm[u] += gm[u] * dt[u];
        }
      }
      if constexpr (kN) {
        T* da = mq[0] == D ? sink : dxn + mq[0] * C;
        T* db = mq[1] == D ? sink : dxn + mq[1] * C;
        T* dc = mq[2] == D ? sink : dxn + mq[2] * C;
        // One factor at a time: slots may alias (x_i^2).
#pragma omp simd
        for (int64_t u = 0; u < C; ++u) da[u] += gt[u] * (hb[u] * c[u] + b[u] * hc[u]) + ht[u] * b[u] * c[u];
#pragma omp simd
        for (int64_t u = 0; u < C; ++u) db[u] += gt[u] * (ha[u] * c[u] + a[u] * hc[u]) + ht[u] * a[u] * c[u];
#pragma omp simd
        for (int64_t u = 0; u < C; ++u) dc[u] += gt[u] * (ha[u] * b[u] + a[u] * hb[u]) + ht[u] * a[u] * b[u];
      }
    }
  }
}

#define MLIP_DEFINE_KERNELS(T)                                                                                  \
  MLIP_CLONES void contract_kernel(const Operands<T>& o, Range r, T* b, T* scratch) {                           \
    contract_nodes<T>(o, r, b, scratch);                                                                        \
  }                                                                                                             \
  MLIP_CLONES void gradient_kernel(const Operands<T>& o, Range r, const T* g, T* gx, T* gz, T* scratch) {       \
    gradient_nodes<T, true, true>(o, r, g, gx, gz, scratch);                                                    \
  }                                                                                                             \
  MLIP_CLONES void gradient_x_kernel(const Operands<T>& o, Range r, const T* g, T* gx, T* gz, T* scratch) {     \
    gradient_nodes<T, true, false>(o, r, g, gx, gz, scratch);                                                   \
  }                                                                                                             \
  MLIP_CLONES void gradient_z_kernel(const Operands<T>& o, Range r, const T* g, T* gx, T* gz, T* scratch) {     \
    gradient_nodes<T, false, true>(o, r, g, gx, gz, scratch);                                                   \
  }                                                                                                             \
  MLIP_CLONES void second_kernel(const Operands<T>& o, Range r, const T* g, const T* hx, const T* hz, T* dg, T* dx, \
                                 T* dz, T* scratch) {                                                           \
    second_nodes<T, true, true>(o, r, g, hx, hz, dg, dx, dz, scratch);                                          \
  }                                                                                                             \
  MLIP_CLONES void second_n_kernel(const Operands<T>& o, Range r, const T* g, const T* hx, const T* hz, T* dg,   \
                                   T* dx, T* dz, T* scratch) {                                                  \
    second_nodes<T, true, false>(o, r, g, hx, hz, dg, dx, dz, scratch);                                         \
  }                                                                                                             \
  MLIP_CLONES void second_z_kernel(const Operands<T>& o, Range r, const T* g, const T* hx, const T* hz, T* dg,   \
                                   T* dx, T* dz, T* scratch) {                                                  \
    second_nodes<T, false, true>(o, r, g, hx, hz, dg, dx, dz, scratch);                                         \
  }
MLIP_DEFINE_KERNELS(double)
MLIP_DEFINE_KERNELS(float)
#undef MLIP_DEFINE_KERNELS

void check(CT x, CT z, CT mono, CT species) {
  TORCH_CHECK(x.dim() == 3, "symmetric_contraction: x (n, D, C) expected, got ", x.sizes());
  const int64_t n = x.size(0), D = x.size(1), C = x.size(2);
  TORCH_CHECK(z.dim() == 4 && z.size(3) == C, "symmetric_contraction: z (S, Q, M, C) with C = ", C, " expected, got ",
              z.sizes());
  TORCH_CHECK(mono.dim() == 2 && mono.size(0) == z.size(1) && mono.size(1) == 3 && mono.scalar_type() == torch::kInt64,
              "symmetric_contraction: mono (Q, 3) int64 with Q = ", z.size(1), " expected, got ", mono.sizes());
  TORCH_CHECK(species.dim() == 1 && species.numel() == n && species.scalar_type() == torch::kInt64,
              "symmetric_contraction: species (n,) int64 expected, got ", species.sizes());
  TORCH_CHECK(z.scalar_type() == x.scalar_type() &&
                  (x.scalar_type() == torch::kFloat64 || x.scalar_type() == torch::kFloat32),
              "symmetric_contraction: x and z must both be float32 or both float64");
  for (CT t : {z, mono, species})
    TORCH_CHECK(t.device() == x.device(), "symmetric_contraction: all tensors must be on one device");
  if (!device_operand_checks_on()) return;
  if (mono.numel() > 0) {
    const auto [lo, hi] = torch::aminmax(mono);
    TORCH_CHECK(lo.item<int64_t>() >= 0 && hi.item<int64_t>() <= D, "symmetric_contraction: a monomial index outside [0, ",
                D, "]");
  }
  if (n > 0) {
    const auto [lo, hi] = torch::aminmax(species);
    TORCH_CHECK(lo.item<int64_t>() >= 0 && hi.item<int64_t>() < z.size(0),
                "symmetric_contraction: a species outside [0, ", z.size(0), ")");
  }
}

template <typename T> Operands<T> operands_of(CT x, CT z, CT mono, CT species) {
  return {x.size(1),       x.size(2),       z.size(1), z.size(2), x.data_ptr<T>(), z.data_ptr<T>(),
          mono.data_ptr<int64_t>(), species.data_ptr<int64_t>()};
}

// Threads: what belongs to a node (b, gx; dg, dx) splits by nodes, what sums over nodes (gz, dz)
// by monomials, every sum in one thread and in node order: bitwise the results of one thread.
bool threaded(int64_t n) { return at::get_num_threads() > 1 && !at::in_parallel_region() && n >= 16; }

// fn(range, scratch) on node ranges (all monomials), each call with `rows` x C of scratch.
template <typename T, typename Fn> void over_nodes(int64_t n, int64_t Q, int64_t C, int64_t rows, Fn fn) {
  at::parallel_for(0, n, 8, [&](int64_t i0, int64_t i1) {
    std::vector<T> scratch(rows * C);
    fn(Range{i0, i1, 0, Q}, scratch.data());
  });
}

// fn(range, scratch) on monomial ranges (all nodes).
template <typename T, typename Fn> void over_monomials(int64_t n, int64_t Q, int64_t C, int64_t rows, Fn fn) {
  at::parallel_for(0, Q, 4, [&](int64_t q0, int64_t q1) {
    std::vector<T> scratch(rows * C);
    fn(Range{0, n, q0, q1}, scratch.data());
  });
}

// The operands are checked and contiguous from here on.
Tensor contract_cpu(CT x, CT z, CT mono, CT species) {
  Tensor b = torch::zeros({x.size(0), z.size(2), x.size(2)}, x.options());
  const int64_t n = x.size(0), C = x.size(2), Q = z.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "symmetric_contraction", [&] {
    const auto o = operands_of<scalar_t>(x, z, mono, species);
    auto run = [&](Range r, scalar_t* scratch) { contract_kernel(o, r, b.data_ptr<scalar_t>(), scratch); };
    if (threaded(n)) return over_nodes<scalar_t>(n, Q, C, 2, run);
    std::vector<scalar_t> scratch(2 * C);
    run(Range{0, n, 0, Q}, scratch.data());
  });
  return b;
}

// The monomials (n, Q, C) with aten operations: x with a row of ones appended, gathered thrice.
Tensor monomials(CT x, CT mono) {
  const Tensor xo = torch::cat({x, torch::ones({x.size(0), 1, x.size(2)}, x.options())}, 1);
  return xo.index_select(1, mono.select(1, 0)) * xo.index_select(1, mono.select(1, 1)) *
         xo.index_select(1, mono.select(1, 2));
}

// The gradients of x and z with aten operations (the CUDA formulation), per channel for all species
// at once as the reference forward; z's only if need_z (else zeros: in MD, forces need x's alone).
std::vector<Tensor> gradients_reference(CT g, CT x, CT z, CT mono, CT species, bool need_z = true) {
  const int64_t n = x.size(0), D = x.size(1), C = x.size(2), S = z.size(0), Q = z.size(1), M = z.size(2);
  const Tensor xo = torch::cat({x, torch::ones({n, 1, C}, x.options())}, 1);
  const Tensor i0 = mono.select(1, 0), i1 = mono.select(1, 1), i2 = mono.select(1, 2);
  const Tensor f0 = xo.index_select(1, i0), f1 = xo.index_select(1, i1), f2 = xo.index_select(1, i2);  // (n, Q, C)
  const Tensor pick = torch::one_hot(species, S).to(x.scalar_type());                                     // (n, S)
  const Tensor ge = (g.permute({2, 0, 1}).unsqueeze(2) * pick.view({1, n, S, 1})).reshape({C, n, S * M});
  const Tensor zc = z.permute({3, 1, 0, 2}).reshape({C, Q, S * M});
  const Tensor gt = torch::bmm(ge, zc.transpose(1, 2)).permute({1, 2, 0});                                // (n, Q, C)
  const Tensor gz = need_z ? torch::bmm((f0 * f1 * f2).permute({2, 1, 0}), ge)                          // (C, Q, n) (C, n, S M)
                                .view({C, Q, S, M}).permute({2, 1, 3, 0})                                 // (S, Q, M, C)
                          : torch::zeros_like(z);
  const Tensor gxo = torch::zeros({n, D + 1, C}, x.options())
                         .index_add(1, i0, gt * f1 * f2)
                         .index_add(1, i1, gt * f0 * f2)
                         .index_add(1, i2, gt * f0 * f1);
  return {gxo.narrow(1, 0, D), gz};
}

// z's gradient only if need_z (else zeros: in MD, forces need x's alone).
std::vector<Tensor> gradients_cpu(CT g, CT x, CT z, CT mono, CT species, bool need_z) {
  Tensor gx = torch::zeros_like(x), gz = torch::zeros_like(z);
  const int64_t n = x.size(0), C = x.size(2), Q = z.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "symmetric_contraction_backward", [&] {
    const auto o = operands_of<scalar_t>(x, z, mono, species);
    scalar_t *gp = g.data_ptr<scalar_t>(), *gxp = gx.data_ptr<scalar_t>(), *gzp = gz.data_ptr<scalar_t>();
    if (threaded(n)) {
      over_nodes<scalar_t>(n, Q, C, 4, [&](Range r, scalar_t* t) { gradient_x_kernel(o, r, gp, gxp, gzp, t); });
      if (!need_z) return;
      return over_monomials<scalar_t>(n, Q, C, 4, [&](Range r, scalar_t* t) { gradient_z_kernel(o, r, gp, gxp, gzp, t); });
    }
    std::vector<scalar_t> scratch(4 * C);
    if (need_z) return gradient_kernel(o, Range{0, n, 0, Q}, gp, gxp, gzp, scratch.data());
    gradient_x_kernel(o, Range{0, n, 0, Q}, gp, gxp, gzp, scratch.data());
  });
  return {gx, gz};
}

// The second derivatives on the CPU: (d/dg, d/dx, d/dz) of <hx, gx> + <hz, gz>.
// (hx, hz contiguous, zeros where the caller had none.)
std::vector<Tensor> second_cpu(CT g, CT x, CT z, CT mono, CT species, CT hx, CT hz) {
  Tensor dg = torch::zeros_like(g), dx = torch::zeros_like(x), dz = torch::zeros_like(z);
  const int64_t n = x.size(0), C = x.size(2), Q = z.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "symmetric_contraction_second", [&] {
    const auto o = operands_of<scalar_t>(x, z, mono, species);
    const scalar_t *gp = g.data_ptr<scalar_t>(), *hxp = hx.data_ptr<scalar_t>(), *hzp = hz.data_ptr<scalar_t>();
    scalar_t *dgp = dg.data_ptr<scalar_t>(), *dxp = dx.data_ptr<scalar_t>(), *dzp = dz.data_ptr<scalar_t>();
    if (threaded(n)) {
      over_nodes<scalar_t>(n, Q, C, 7,
                           [&](Range r, scalar_t* t) { second_n_kernel(o, r, gp, hxp, hzp, dgp, dxp, dzp, t); });
      return over_monomials<scalar_t>(
          n, Q, C, 7, [&](Range r, scalar_t* t) { second_z_kernel(o, r, gp, hxp, hzp, dgp, dxp, dzp, t); });
    }
    std::vector<scalar_t> scratch(7 * C);
    second_kernel(o, Range{0, n, 0, Q}, gp, hxp, hzp, dgp, dxp, dzp, scratch.data());
  });
  return {dg, dx, dz};
}

// The nodes per chunk in which z's gradients sum each species' nodes (ContractGradZ,
// ContractSecondZ): about 2^20 threads (a chunk each per element of z's row, Q M C), chunks of
// at least 64 nodes. At most nodes / size + S chunks (each species' last may be short).
int64_t z_chunk_size(int64_t nodes, int64_t row) {
  const int64_t wanted = std::max<int64_t>(1, (int64_t(1) << 20) / std::max<int64_t>(row, 1));
  return std::max<int64_t>(64, (nodes + wanted - 1) / wanted);
}

// The device kernels (symmetric_contraction_elements.h) and the tables their sums walk: the
// monomials' slots by component (x's gradients), the nodes by species and their chunks (z's), on
// the operands' device (made there: nothing read back).
struct Tables {
  Tensor by_slot, slot_first, by_species, species_first, chunk_first;
  int64_t chunk_size = 0, chunks = 0;
  Tables(CT x, CT z, CT mono, CT species, bool slots, bool nodes) {
    if (slots) std::tie(by_slot, slot_first) = detail::grouped_by(mono.reshape({-1}), x.size(1) + 1);
    if (!nodes) return;
    const int64_t n_species = z.size(0);
    std::tie(by_species, species_first) = detail::grouped_by(species, n_species);
    chunk_size = z_chunk_size(x.size(0), z.numel() / std::max<int64_t>(n_species, 1));
    chunks = (x.size(0) + chunk_size - 1) / chunk_size + n_species;
    const Tensor count = species_first.narrow(0, 1, n_species) - species_first.narrow(0, 0, n_species);
    chunk_first = torch::cat({torch::zeros({1}, count.options()), torch::div(count + (chunk_size - 1), chunk_size, "floor").cumsum(0)});
  }
};

template <typename T>
kernels::ContractionArgs<T> device_args(CT x, CT z, CT mono, CT species, const Tables& t, const T* g = nullptr,
                                        const T* hx = nullptr, const T* hz = nullptr) {
  auto p = [](CT v) { return v.defined() ? v.data_ptr<int64_t>() : nullptr; };
  return {x.size(1),       x.size(2),        z.size(1),     z.size(2),      x.data_ptr<T>(), z.data_ptr<T>(),
          g,               hx,               hz,            p(mono),        p(species),      p(t.by_slot),
          p(t.slot_first), p(t.by_species),  p(t.species_first), p(t.chunk_first), z.size(0),  t.chunk_size};
}

// z's gradient from its chunks' sums (chunks, Q M C): each species' chunks summed in order.
template <typename T> Tensor sum_chunks(const Tables& t, const Tensor& part, CT z) {
  Tensor out = torch::empty_like(z);
  const int64_t row = z.numel() / std::max<int64_t>(z.size(0), 1);
  detail::run_elements(
      kernels::ContractSumChunks<T>{{t.chunk_first.data_ptr<int64_t>(), row, part.data_ptr<T>()}, out.data_ptr<T>()},
      out.numel(), z.device());
  return out;
}

Tensor contract_device(CT x, CT z, CT mono, CT species) {
  const Tables t(x, z, mono, species, false, false);
  Tensor b = torch::empty({x.size(0), z.size(2), x.size(2)}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "symmetric_contraction", [&] {
    const auto o = device_args<scalar_t>(x, z, mono, species, t);
    detail::run_elements(kernels::ContractForward<scalar_t>{o, b.data_ptr<scalar_t>()}, b.numel(), x.device());
  });
  return b;
}

std::vector<Tensor> gradients_device(CT g, CT x, CT z, CT mono, CT species, bool need_z) {
  const Tables t(x, z, mono, species, true, need_z);
  Tensor gx = torch::empty_like(x), gz;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "symmetric_contraction_backward", [&] {
    const auto o = device_args<scalar_t>(x, z, mono, species, t, g.data_ptr<scalar_t>());
    detail::run_elements(kernels::ContractGradX<scalar_t>{o, gx.data_ptr<scalar_t>()}, gx.numel(), x.device());
    if (!need_z) return;
    const Tensor part = torch::empty({t.chunks, z.numel() / std::max<int64_t>(z.size(0), 1)}, z.options());
    detail::run_elements(kernels::ContractGradZ<scalar_t>{o, part.data_ptr<scalar_t>()}, part.numel(), x.device());
    gz = sum_chunks<scalar_t>(t, part, z);
  });
  return {gx, need_z ? gz : torch::zeros_like(z)};
}

std::vector<Tensor> second_device(CT g, CT x, CT z, CT mono, CT species, CT hx, CT hz) {
  const Tables t(x, z, mono, species, true, true);
  Tensor dg = torch::empty_like(g), dx = torch::empty_like(x), dz;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "symmetric_contraction_second", [&] {
    const auto o = device_args<scalar_t>(x, z, mono, species, t, g.data_ptr<scalar_t>(), hx.data_ptr<scalar_t>(),
                                         hz.data_ptr<scalar_t>());
    detail::run_elements(kernels::ContractSecondG<scalar_t>{o, dg.data_ptr<scalar_t>()}, dg.numel(), x.device());
    detail::run_elements(kernels::ContractSecondX<scalar_t>{o, dx.data_ptr<scalar_t>()}, dx.numel(), x.device());
    const Tensor part = torch::empty({t.chunks, z.numel() / std::max<int64_t>(z.size(0), 1)}, z.options());
    detail::run_elements(kernels::ContractSecondZ<scalar_t>{o, part.data_ptr<scalar_t>()}, part.numel(), x.device());
    dz = sum_chunks<scalar_t>(t, part, z);
  });
  return {dg, dx, dz};
}

// The same by differentiating the aten formulation (on other devices, and for third and higher
// derivatives).
std::vector<Tensor> second_reference(CT g, CT x, CT z, CT mono, CT species, CT hx, CT hz) {
  const bool graph = at::GradMode::is_enabled();  // a third derivative to follow
  at::AutoGradMode grad_mode(true);
  std::vector<Tensor> in;
  for (CT t : {g, x, z}) in.push_back(graph && t.requires_grad() ? t : t.detach().requires_grad_(true));
  const auto out = gradients_reference(in[0], in[1], in[2], mono, species);
  std::vector<Tensor> outputs, weights;
  if (hx.defined()) outputs.push_back(out[0]), weights.push_back(hx);
  if (hz.defined()) outputs.push_back(out[1]), weights.push_back(hz);
  if (outputs.empty()) return {Tensor(), Tensor(), Tensor()};
  return torch::autograd::grad(outputs, in, weights, /*retain_graph=*/true, /*create_graph=*/graph,
                               /*allow_unused=*/true);
}

const auto& contract_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::symmetric_contraction", "")
                             .typed<Tensor(CT, CT, CT, CT)>();
  return op;
}

const auto& gradients_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::symmetric_contraction_backward", "")
                             .typed<std::vector<Tensor>(CT, CT, CT, CT, CT, bool)>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The second derivatives (d/dg, d/dx, d/dz of <hx, gx> + <hz, gz>) on the operators' path, or by
// differentiating the aten formulation where that is the path or a graph is asked for (third
// derivatives).
std::vector<Tensor> second_entry(CT g, CT x, CT z, CT mono, CT species, CT hx_in, CT hz_in) {
  const auto how = detail::kernel_path(x.device());
  if (at::GradMode::is_enabled() || how == detail::KernelPath::aten)
    return second_reference(g, x, z, mono, species, hx_in, hz_in);
  const Tensor hx = hx_in.defined() ? hx_in.contiguous() : torch::zeros_like(x);
  const Tensor hz = hz_in.defined() ? hz_in.contiguous() : torch::zeros_like(z);
  const auto run = how == detail::KernelPath::cpu_kernels ? second_cpu : second_device;
  return run(g.contiguous(), x.contiguous(), z.contiguous(), mono.contiguous(), species.contiguous(), hx, hz);
}

class SymmetricContraction : public torch::autograd::Function<SymmetricContraction> {
 public:
  static variable_list forward(AutogradContext* ctx, CT x, CT z, CT mono, CT species) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({x, z, mono, species});
    return {contract_op().call(x, z, mono, species)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto v = ctx->get_saved_variables();
    const OperandsCheckedByForward checked;   // the forward checked the indices: no device reads again
    if (!grad[0].defined()) return {{}, {}, {}, {}};
    // z's gradient only where asked for: forces (autograd.grad to the edge vectors) need x's alone.
    auto g = gradients_op().call(grad[0], v[0], v[1], v[2], v[3], ctx->needs_input_grad(1));
    return {g[0], g[1], {}, {}};
  }
};

// The backward as a function of (g, x, z) (gz zeros unless need_z); its own backward is
// second_entry.
class SymmetricContractionBackward : public torch::autograd::Function<SymmetricContractionBackward> {
 public:
  static variable_list forward(AutogradContext* ctx, CT g, CT x, CT z, CT mono, CT species, bool need_z) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({g, x, z, mono, species});
    ctx->saved_data["need_z"] = need_z;
    return gradients_op().call(g, x, z, mono, species, need_z);
  }
  static variable_list backward(AutogradContext* ctx, variable_list h) {
    const auto v = ctx->get_saved_variables();
    const OperandsCheckedByForward checked;   // the forward checked the indices: no device reads again
    const Tensor hz = ctx->saved_data["need_z"].toBool() ? h[1] : Tensor();
    auto d = second_entry(v[0], v[1], v[2], v[3], v[4], h[0], hz);
    return {d[0], d[1], d[2], {}, {}, {}};
  }
};

Tensor contract_autograd(CT x, CT z, CT mono, CT species) {
  return SymmetricContraction::apply(x, z, mono, species)[0];
}

std::vector<Tensor> gradients_autograd(CT g, CT x, CT z, CT mono, CT species, bool need_z) {
  return SymmetricContractionBackward::apply(g, x, z, mono, species, need_z);
}

// The operators' entries on every device: the checks, then the path (mlip/ops/operators.h's
// KernelChoice) on contiguous operands.
Tensor contract_entry(CT x, CT z, CT mono, CT species) {
  check(x, z, mono, species);
  const auto how = detail::kernel_path(x.device());
  if (how == detail::KernelPath::aten) return symmetric_contraction_reference(x, z, mono, species);
  const auto run = how == detail::KernelPath::cpu_kernels ? contract_cpu : contract_device;
  return run(x.contiguous(), z.contiguous(), mono.contiguous(), species.contiguous());
}

std::vector<Tensor> gradients_entry(CT g, CT x, CT z, CT mono, CT species, bool need_z) {
  check(x, z, mono, species);
  TORCH_CHECK(g.dim() == 3 && g.size(0) == x.size(0) && g.size(1) == z.size(2) && g.size(2) == x.size(2) &&
                  g.scalar_type() == x.scalar_type() && g.device() == x.device(),
              "symmetric_contraction_backward: g (n, M, C) of x's dtype and device expected, got ", g.sizes());
  const auto how = detail::kernel_path(x.device());
  if (how == detail::KernelPath::aten) return gradients_reference(g, x, z, mono, species, need_z);
  const auto run = how == detail::KernelPath::cpu_kernels ? gradients_cpu : gradients_device;
  return run(g.contiguous(), x.contiguous(), z.contiguous(), mono.contiguous(), species.contiguous(), need_z);
}

}  // namespace

Tensor symmetric_contraction_reference(CT x, CT z, CT mono, CT species) {
  // Per channel, all species at once: (C, n, Q) x (C, Q, S M), then each node's species.
  const int64_t n = x.size(0), C = x.size(2), S = z.size(0), Q = z.size(1), M = z.size(2);
  const Tensor t = monomials(x, mono).permute({2, 0, 1});                 // (C, n, Q)
  const Tensor zc = z.permute({3, 1, 0, 2}).reshape({C, Q, S * M});       // (C, Q, S M)
  const Tensor all = torch::bmm(t, zc).view({C, n, S, M});
  const Tensor pick = torch::one_hot(species, S).to(x.scalar_type()).view({1, n, S, 1});
  return (all * pick).sum(2).permute({1, 2, 0});                          // (n, M, C)
}

Tensor symmetric_contraction(CT x, CT z, CT mono, CT species) { return contract_op().call(x, z, mono, species); }

void link_symmetric_contraction_operator() {}

}  // namespace mlip

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("symmetric_contraction(Tensor x, Tensor z, Tensor mono, Tensor species) -> Tensor");
  m.def("symmetric_contraction_backward(Tensor g, Tensor x, Tensor z, Tensor mono, Tensor species, "
        "bool need_z=True) -> Tensor[]");
}
TORCH_LIBRARY_IMPL(mlip, CPU, m) {
  m.impl("symmetric_contraction", &mlip::contract_entry);
  m.impl("symmetric_contraction_backward", &mlip::gradients_entry);
}
TORCH_LIBRARY_IMPL(mlip, CUDA, m) {
  m.impl("symmetric_contraction", &mlip::contract_entry);
  m.impl("symmetric_contraction_backward", &mlip::gradients_entry);
}
TORCH_LIBRARY_IMPL(mlip, Autograd, m) {
  m.impl("symmetric_contraction", &mlip::contract_autograd);
  m.impl("symmetric_contraction_backward", &mlip::gradients_autograd);
}
