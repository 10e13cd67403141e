// MACE's radial basis of the edge lengths as one operator:
//
//   torch.ops.mlip.bessel_radial(r, frequencies, cutoff, p, harmonic, order) -> y (E, nb)
//   y[e, n] = d^order/dr^order [ sqrt(2 / cutoff) sin(k_n r) / r x envelope_p(r / cutoff) ] at r[e]
//
// with r (E, 1), the frequencies k (nb,) (converted to r's dtype), envelope_p mace-torch's
// PolynomialCutoff 1 - (p+1)(p+2)/2 u^p + p(p+2) u^(p+1) - p(p+1)/2 u^(p+2) times the step
// r < cutoff, or 1 where p = 0 (the basis alone, for a model that applies the envelope elsewhere).
// harmonic says that k_n = (n + 1) k_0 (mace-torch's default n pi / r_max): then only k_0 is read
// and the sines come from one sine and cosine per edge by the angle-addition recurrence.
// Why: the basis and envelope were some twenty aten operations on (E, 1) and (E, nb) columns and
// more in their backward; on a CPU chunk of a few thousand edges each ran on one thread (below
// aten's grain), on a GPU each was a launch. The derivatives are closed forms (Leibniz's rule over
// the sine, 1/r and the envelope polynomial), so the gradient is the same operator one order up:
//   bessel_radial_backward(g, r, frequencies, cutoff, p, harmonic, order) = sum_n g[e, n] y^(order+1)[e, n]  (E, 1),
// itself differentiable (d/dg = h y^(order+1), d/dr = the backward at order + 1): derivatives of
// any order up to 6 (the force loss takes the second). No gradient reaches the frequencies (a
// constant of the model). Device kernels (src/ops/bessel_radial_elements.h) on the CPU and a GPU;
// the aten formulation (the same closed forms) with MLIP_KERNELS=aten.
#pragma once

#include <torch/script.h>

namespace mlip {

/// The operator through the dispatcher (with autograd).
torch::Tensor bessel_radial(const torch::Tensor& r, const torch::Tensor& frequencies, double cutoff, int64_t p,
                            bool harmonic, int64_t order = 0);

/// The same with aten operations (the aten path).
torch::Tensor bessel_radial_reference(const torch::Tensor& r, const torch::Tensor& frequencies, double cutoff, int64_t p,
                                      int64_t order);

/// Does nothing; model loaders and builders call it so that static links keep the registration.
void link_bessel_radial_operator();

}  // namespace mlip
