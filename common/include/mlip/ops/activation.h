// The radial nets' activation as one operator with its derivatives written out:
//
//   torch.ops.mlip.scaled_silu(x, c) -> c * x * sigmoid(x)
//
// (MACE's radial MLP: e3nn's SiLU, normalised by c.) Why: a force loss differentiates the net's
// backward pass again, and autograd's formula for SiLU's second derivative is about a dozen passes
// over (edges x width) arrays, a third of a MACE training step on a CPU. Here each derivative is one
// pass: the backward, gx = g c s (1 + x (1 - s)) with s = sigmoid(x), is the operator
// scaled_silu_backward(g, x, c), itself differentiable (with respect to g: itself; to x:
// scaled_silu_second(h, g, x, c) = h g c s (1 - s) (2 + x (1 - 2 s)), whose own derivatives are
// autograd's of its aten formulation): derivatives of any order.
// Device kernels (src/ops/activation_elements.h) on the CPU and a GPU; the aten formulations with
// MLIP_KERNELS=aten (mlip/ops/operators.h's KernelChoice).
#pragma once

#include <torch/script.h>

namespace mlip {

/// The operator through the dispatcher (with autograd).
torch::Tensor scaled_silu(const torch::Tensor& x, double c);

/// The same with plain aten operations (the tests' reference).
torch::Tensor scaled_silu_reference(const torch::Tensor& x, double c);

/// Does nothing; model loaders and builders call it so that static links keep the registration.
void link_activation_operator();

}  // namespace mlip
