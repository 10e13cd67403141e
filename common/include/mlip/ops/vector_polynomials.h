// Polynomials of each row's 3-vector as one operator:
//
//   torch.ops.mlip.vector_polynomials(u, terms, coefficients, n_out) -> y (E, n_out)
//   y[e, i] = sum over the terms t of output i of coefficients[t] u[e,0]^a u[e,1]^b u[e,2]^c
//
// with terms (T, 4) int64 rows (i, a, b, c), powers up to 15, and coefficients (T,) (converted to
// u's dtype). Why: MACE's spherical harmonics of the edge directions (mlip/o3.h's
// spherical_harmonics_terms) were some sixty aten operations on (E,) columns and twice as many in
// their backward; on a CPU chunk of a few thousand edges each ran on one thread (below aten's grain),
// on a GPU each was a launch. Here the forward is one pass over the rows (each row's powers once,
// then the terms), and so is the gradient with respect to u,
//   vector_polynomials_backward(g, u, terms, coefficients) = sum_i g[e, i] grad P_i(u[e]) (E, 3),
// itself differentiable: along h, d/dg is the derivative polynomials' forward contracted with h and
// d/du the backward of the derivative polynomials (outputs c n_out + i) with g' = h_c g_i, both
// through the dispatcher, so derivatives of any order. No gradient reaches the terms or
// coefficients (they are constants of the model).
// Device kernels (src/ops/vector_polynomials_elements.h) on the CPU and a GPU; the aten formulation
// with MLIP_KERNELS=aten (mlip/ops/operators.h's KernelChoice).
#pragma once

#include <utility>

#include <torch/script.h>

namespace mlip {

/// The operator through the dispatcher (with autograd).
torch::Tensor vector_polynomials(const torch::Tensor& u, const torch::Tensor& terms, const torch::Tensor& coefficients,
                                 int64_t n_out);

/// The same with plain aten operations (the tests' reference, the aten path).
torch::Tensor vector_polynomials_reference(const torch::Tensor& u, const torch::Tensor& terms,
                                           const torch::Tensor& coefficients, int64_t n_out);

/// The terms and coefficients of the derivatives d y_i / d u_c, as outputs c n_out + i, made on
/// the table's device; where device values are not read (mlip/ops/operators.h: a CUDA graph's
/// recording) three rows per term, one of coefficient 0 where its power along c is 0.
std::pair<torch::Tensor, torch::Tensor> vector_polynomials_derivatives(const torch::Tensor& terms,
                                                                       const torch::Tensor& coefficients, int64_t n_out);

/// Does nothing; model loaders and builders call it so that static links keep the registration.
void link_vector_polynomials_operator();

}  // namespace mlip
