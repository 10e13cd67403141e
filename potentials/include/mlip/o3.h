// O(3) building blocks of equivariant models, in the real basis and with the conventions of e3nn
// (which MACE, NequIP and Allegro use), so that models built here and models imported from those
// codes compute the same function:
//   - irreps are (l, p) with the components of l ordered m = -l..l;
//   - real spherical harmonics are the standard ones (no Condon-Shortley phase; cos(m phi) for
//     m > 0, sin(|m| phi) for m < 0) of the rotated vector (z, x, y): e3nn's y is the polar axis;
//     "component" normalisation: |Y^l|^2 = 2l + 1 on the unit sphere;
//   - Wigner 3j symbols are e3nn's: the unit-norm invariant of l1 x l2 x l3 whose element
//     (m1, m2, m3) = (0, 0, 0), or else first non-zero element, is positive, defined for
//     l1 <= l2 <= l3 and obtained for other orders by permuting its axes (times (-1)^(l1+l2+l3)
//     for an odd permutation).
// Everything is computed here (float64, CPU), from these definitions; no tables are shipped.
#pragma once

#include <utility>

#include <string>
#include <vector>

#include <torch/torch.h>

namespace mlip::o3 {

struct Irrep {
  int l = 0;
  int p = 1;  // parity, +1 (even) or -1 (odd)
  int dim() const { return 2 * l + 1; }
  bool operator==(const Irrep& o) const { return l == o.l && p == o.p; }
  bool operator!=(const Irrep& o) const { return !(*this == o); }
  // e3nn's order: by l, then odd before even.
  bool operator<(const Irrep& o) const { return l != o.l ? l < o.l : p < o.p; }
  std::string str() const { return std::to_string(l) + (p > 0 ? "e" : "o"); }
};

/// The irrep of a spherical harmonic of degree l: (l, (-1)^l).
inline Irrep natural(int l) { return {l, l % 2 == 0 ? 1 : -1}; }

/// The irreps of the product of two: |l1 - l2| <= l <= l1 + l2, parity p1 p2, l ascending.
std::vector<Irrep> product(const Irrep& a, const Irrep& b);

/// Wigner 3j symbol (2 l1 + 1, 2 l2 + 1, 2 l3 + 1), float64; cached.
torch::Tensor wigner_3j(int l1, int l2, int l3);

/// The real spherical harmonics, component normalisation, l = 0..lmax, of unit vectors v (E, 3), in
/// e3nn's basis, as the terms and coefficients of torch.ops.mlip.vector_polynomials
/// (mlip/ops/vector_polynomials.h) with (lmax + 1)^2 outputs: (terms (T, 4) int64, coefficients
/// (T,) float64).
std::pair<torch::Tensor, torch::Tensor> spherical_harmonics_terms(int lmax);

/// The same harmonics evaluated with aten operations (E, (lmax + 1)^2) (the tests' reference).
torch::Tensor spherical_harmonics(int lmax, const torch::Tensor& v);

/// MACE's generalised Clebsch-Gordan coefficients for the symmetric contraction: the couplings
/// of `nu` copies of the irreps `in` (multiplicity 1 each) to `out`, as MACE computes them (all
/// paths of the successive products, sorted stably by their final irrep), shape
/// (out.dim(), D, ..., D (nu times), paths) with D = sum of in's dims; a zero tensor with one path
/// when no path reaches `out`.
torch::Tensor coupling_basis(const std::vector<Irrep>& in, const Irrep& out, int nu);

/// e3nn's normalisation constant of SiLU: 1 / sqrt(<silu(z)^2>), the mean over the 10^6 normal
/// samples e3nn draws (float64, seed 0) - the value e3nn's normalize2mom computes and MACE's
/// radial networks and readout use.
constexpr double kSiluNorm = 1.6791767923989418;

}  // namespace mlip::o3
