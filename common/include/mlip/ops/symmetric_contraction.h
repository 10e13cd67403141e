// MACE's symmetric contraction (the product basis) evaluated on the node's monomials without
// storing them, as one operator:
//
//   torch.ops.mlip.symmetric_contraction(x, z, mono, species) -> b
//     b[n, m, c] = sum_q z[species[n], q, m, c] * x[n, i1(q), c] x[n, i2(q), c] x[n, i3(q), c]
//
//     x (n, D, C) node features (D components, C channels), z (S, Q, M, C) the coupling of each
//     monomial q to each output component m with the species' weights folded in, mono (Q, 3) the
//     components of each monomial (index D stands for 1: monomials of degree 1 and 2), species
//     (n,) in [0, S).
//
// Composed of aten operations, the monomials of every node (n x Q x C, Q ~ 400 for correlation 3
// and l <= 3) are gathered, multiplied and kept for autograd. Here the CPU kernel forms each
// monomial in registers, one node at a time, and keeps only its inputs. Its backward is a second
// operator, torch.ops.mlip.symmetric_contraction_backward(g, x, z, mono, species) -> [gx, gz], a
// CPU kernel too, whose own backward (a force loss) is a third CPU kernel (the monomials' second
// derivatives along the incoming direction); third and higher derivatives differentiate the aten
// formulation. On a GPU the device kernels run (symmetric_contraction_elements.h in
// libmlip_cuda_ops.so: forward, backward and the second derivatives, one thread per output element),
// or the aten formulations (mlip/ops/operators.h's KernelChoice). The backward computes z's gradient
// only where autograd asks for it (forces alone need x's).
// With several LibTorch threads the kernels split what belongs to a node (b, gx) by nodes and
// what sums over nodes (the weights' gradient) by monomials, every sum in node order: the results
// are bitwise those of one thread.
//
// Registered when this library is loaded (part of mlip::model); Python needs
// torch.ops.load_library("<build>/lib/libmlip_ops.so") before torch.jit.load of a model using it.
#pragma once

#include <torch/script.h>

namespace mlip {

/// The operator through the dispatcher (with autograd).
torch::Tensor symmetric_contraction(const torch::Tensor& x, const torch::Tensor& z, const torch::Tensor& mono,
                                    const torch::Tensor& species);

/// The same with plain aten operations (the tests' reference).
torch::Tensor symmetric_contraction_reference(const torch::Tensor& x, const torch::Tensor& z, const torch::Tensor& mono,
                                              const torch::Tensor& species);

/// Does nothing; model loaders and builders call it so that static links keep the registration.
void link_symmetric_contraction_operator();

}  // namespace mlip
