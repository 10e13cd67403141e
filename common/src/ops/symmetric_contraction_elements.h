// symmetric_contraction's device kernels (mlip/ops/symmetric_contraction.h), one element each, for
// the host and the device (device_kernels.h). Each thread forms the monomials it needs in
// registers: nothing of size nodes x monomials x channels is stored.
#pragma once

#include "device_kernels.h"

namespace mlip::kernels {

// The operands (rows of contiguous arrays) and the index tables, on the kernels' device.
template <typename T> struct ContractionArgs {
  using value_type = T;
  int64_t d, c, q, m;              // components, channels, monomials, outputs
  const T *x, *z;                  // (n, D, C), (S, Q, M, C)
  const T *g, *hx, *hz;            // the incoming gradient (n, M, C); the second derivative's
                                   // directions (n, D, C), (S, Q, M, C)
  const int64_t *mono, *species;   // (Q, 3) with D standing for 1, (n,)
  // The slots (3 q + position) that hold component d: by_slot[slot_first[d] .. slot_first[d + 1]);
  // the nodes of species s in node order: by_species[species_first[s] ..]; in chunks of
  // chunk_size nodes (z's gradients), species s's being chunks chunk_first[s] .. chunk_first[s + 1].
  const int64_t *by_slot, *slot_first, *by_species, *species_first, *chunk_first;
  int64_t n_species, chunk_size;

  MLIP_HD T factor(const T* rows, int64_t node, int64_t slot, int64_t u, T none) const {
    const int64_t i = mono[slot];
    return i == d ? none : rows[(node * d + i) * c + u];
  }
  MLIP_HD T monomial(int64_t node, int64_t q3, int64_t u) const {
    return factor(x, node, q3, u, T(1)) * factor(x, node, q3 + 1, u, T(1)) * factor(x, node, q3 + 2, u, T(1));
  }
  // The monomial's change along hx.
  MLIP_HD T monomial_along(int64_t node, int64_t q3, int64_t u) const {
    const T a = factor(x, node, q3, u, T(1)), b = factor(x, node, q3 + 1, u, T(1)), cc = factor(x, node, q3 + 2, u, T(1));
    return factor(hx, node, q3, u, T(0)) * b * cc + a * factor(hx, node, q3 + 1, u, T(0)) * cc +
           a * b * factor(hx, node, q3 + 2, u, T(0));
  }
  // Chunk k's nodes, by_species[first .. last) (none for a k past the last species' chunks).
  MLIP_HD void chunk_nodes(int64_t k, int64_t& first, int64_t& last) const {
    first = last = 0;
    if (k >= chunk_first[n_species]) return;
    int64_t lo = 0, hi = n_species;   // chunk_first[lo] <= k < chunk_first[hi]
    while (hi - lo > 1) {
      const int64_t mid = (lo + hi) / 2;
      (chunk_first[mid] <= k ? lo : hi) = mid;
    }
    first = species_first[lo] + (k - chunk_first[lo]) * chunk_size;
    last = first + chunk_size < species_first[lo + 1] ? first + chunk_size : species_first[lo + 1];
  }
  // sum_m g[node, m, u] w[species, q, m, u] for w = z or hz.
  MLIP_HD T along_outputs(const T* weights, int64_t node, int64_t q, int64_t u) const {
    const T* wq = weights + ((species[node] * this->q + q) * m) * c + u;
    const T* gn = g + node * m * c + u;
    T sum = 0;
    for (int64_t mm = 0; mm < m; ++mm) sum += gn[mm * c] * wq[mm * c];
    return sum;
  }
};

// b[n, m, u] = sum_q z[species[n], q, m, u] t_q(n, u); elements (n, M, C).
template <typename T> struct ContractForward {
  static constexpr Kernel id = Kernel::ContractForward;
  ContractionArgs<T> o;
  T* b;
  MLIP_HD void operator()(int64_t i) const {
    const int64_t u = i % o.c, mm = i / o.c % o.m, n = i / (o.c * o.m);
    const T* z = o.z + (o.species[n] * o.q * o.m + mm) * o.c + u;
    T sum = 0;
    for (int64_t q = 0; q < o.q; ++q) sum += z[q * o.m * o.c] * o.monomial(n, 3 * q, u);
    b[i] = sum;
  }
};

// gx[n, d, u] = sum over the slots holding d of (sum_m g z) times the slot's other two factors;
// elements (n, D, C).
template <typename T> struct ContractGradX {
  static constexpr Kernel id = Kernel::ContractGradX;
  ContractionArgs<T> o;
  T* gx;
  MLIP_HD void operator()(int64_t i) const {
    const int64_t u = i % o.c, d = i / o.c % o.d, n = i / (o.c * o.d);
    T sum = 0;
    for (int64_t f = o.slot_first[d]; f < o.slot_first[d + 1]; ++f) {
      const int64_t slot = o.by_slot[f], q3 = slot - slot % 3;
      const int64_t s1 = q3 + (slot + 1) % 3, s2 = q3 + (slot + 2) % 3;   // the other two slots
      sum += o.along_outputs(o.z, n, q3 / 3, u) * o.factor(o.x, n, s1, u, T(1)) * o.factor(o.x, n, s2, u, T(1));
    }
    gx[i] = sum;
  }
};

// gz[s, q, m, u] = sum_{n of species s} g[n, m, u] t_q(n, u), in node order, each species' nodes
// in chunks of chunk_size (S Q M C threads alone are too few for a GPU when the batch is large,
// and a batch may hold a few of many species): chunk k's sum into gz_chunk[k, q, m, u], which
// ContractSumChunks sums over each species' chunks; elements (chunks, Q, M, C).
template <typename T> struct ContractGradZ {
  static constexpr Kernel id = Kernel::ContractGradZ;
  ContractionArgs<T> o;
  T* gz_chunk;
  MLIP_HD void operator()(int64_t i) const {
    const int64_t u = i % o.c, mm = i / o.c % o.m, q = i / (o.c * o.m) % o.q;
    int64_t first = 0, last = 0;
    o.chunk_nodes(i / (o.c * o.m * o.q), first, last);
    T sum = 0;
    for (int64_t f = first; f < last; ++f) {
      const int64_t n = o.by_species[f];
      sum += o.g[(n * o.m + mm) * o.c + u] * o.monomial(n, 3 * q, u);
    }
    gz_chunk[i] = sum;
  }
};

// out[s, r] = sum of part[k, r] over species s's chunks k, in chunk order; elements (S, row).
template <typename T> struct ChunkArgs {
  using value_type = T;
  const int64_t* chunk_first;   // (S + 1,)
  int64_t row;
  const T* part;                // (chunks, row)
};
template <typename T> struct ContractSumChunks {
  static constexpr Kernel id = Kernel::ContractSumChunks;
  ChunkArgs<T> o;
  T* out;
  MLIP_HD void operator()(int64_t i) const {
    const int64_t r = i % o.row, s = i / o.row;
    T sum = 0;
    for (int64_t k = o.chunk_first[s]; k < o.chunk_first[s + 1]; ++k) sum += o.part[k * o.row + r];
    out[i] = sum;
  }
};

// The backward of the backward along (hx, hz) (symmetric_contraction.cpp's second_nodes): with t
// the monomial and dt its change along hx,
//   dg[n, m, u] = sum_q z dt + hz t; elements (n, M, C).
template <typename T> struct ContractSecondG {
  static constexpr Kernel id = Kernel::ContractSecondG;
  ContractionArgs<T> o;
  T* dg;
  MLIP_HD void operator()(int64_t i) const {
    const int64_t u = i % o.c, mm = i / o.c % o.m, n = i / (o.c * o.m);
    const int64_t zo = (o.species[n] * o.q * o.m + mm) * o.c + u;
    T sum = 0;
    for (int64_t q = 0; q < o.q; ++q) {
      const int64_t at = zo + q * o.m * o.c;
      sum += o.z[at] * o.monomial_along(n, 3 * q, u) + o.hz[at] * o.monomial(n, 3 * q, u);
    }
    dg[i] = sum;
  }
};

//   dx[n, d, u] = sum over the slots holding d of gt (the other factors' change along hx) + ht (the
//   other factors), gt = sum_m g z, ht = sum_m g hz; elements (n, D, C).
template <typename T> struct ContractSecondX {
  static constexpr Kernel id = Kernel::ContractSecondX;
  ContractionArgs<T> o;
  T* dx;
  MLIP_HD void operator()(int64_t i) const {
    const int64_t u = i % o.c, d = i / o.c % o.d, n = i / (o.c * o.d);
    T sum = 0;
    for (int64_t f = o.slot_first[d]; f < o.slot_first[d + 1]; ++f) {
      const int64_t slot = o.by_slot[f], q3 = slot - slot % 3;
      const int64_t s1 = q3 + (slot + 1) % 3, s2 = q3 + (slot + 2) % 3;
      const T b = o.factor(o.x, n, s1, u, T(1)), c = o.factor(o.x, n, s2, u, T(1));
      const T hb = o.factor(o.hx, n, s1, u, T(0)), hc = o.factor(o.hx, n, s2, u, T(0));
      sum += o.along_outputs(o.z, n, q3 / 3, u) * (hb * c + b * hc) + o.along_outputs(o.hz, n, q3 / 3, u) * b * c;
    }
    dx[i] = sum;
  }
};

//   dz[s, q, m, u] = sum_{n of species s} g[n, m, u] dt_q(n, u), in node order, in chunks as
//   ContractGradZ's; elements (chunks, Q, M, C).
template <typename T> struct ContractSecondZ {
  static constexpr Kernel id = Kernel::ContractSecondZ;
  ContractionArgs<T> o;
  T* dz_chunk;
  MLIP_HD void operator()(int64_t i) const {
    const int64_t u = i % o.c, mm = i / o.c % o.m, q = i / (o.c * o.m) % o.q;
    int64_t first = 0, last = 0;
    o.chunk_nodes(i / (o.c * o.m * o.q), first, last);
    T sum = 0;
    for (int64_t f = first; f < last; ++f) {
      const int64_t n = o.by_species[f];
      sum += o.g[(n * o.m + mm) * o.c + u] * o.monomial_along(n, 3 * q, u);
    }
    dz_chunk[i] = sum;
  }
};

}  // namespace mlip::kernels
