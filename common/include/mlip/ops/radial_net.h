// The embedding nets of se_e2_a-like models (DeePMD's tanh nets of one scalar input) as one
// operator that returns the net's value and its derivative with respect to the input:
//
//   torch.ops.mlip.tanh_net(x, params, residual) -> (y, dy/dx)
//     x        (E,)  the input of each row
//     params   [W_0, b_0, W_1, b_1, ...], W_l (in_l, out_l), b_l (out_l); in_0 = 1
//     residual one per layer: 0 none, 1 identity (out = in), 2 doubled (out = 2 in)
//     y_0 = x; y_{l+1} = R_l(y_l) + tanh(y_l W_l + b_l), R_l(y) = 0, y or [y, y]
//   -> y_L (E, M) and dy_L/dx (E, M), carried through the layers in forward mode.
//
// Why: a force loss needs d/dtheta of dE/dx. Autograd gets it by differentiating the net's
// backward pass, many passes over (E x width) arrays in memory. Here rows go through all layers in
// blocks that stay in cache, with the derivative alongside, and the operator's backward is
// written out: the gradient with respect to x is sum_m dL/dy_m dy_m/dx (differentiable: the
// force of a force loss), the parameters' gradients come from one blocked reverse pass over the
// values kept in the forward (kept only when a parameter requires grad). Not available: a
// derivative with respect to x of dy/dx (a Hessian with respect to positions).
//
// ATen operations on row blocks of 512 on the CPU, one block elsewhere; the forward that keeps
// nothing for parameter gradients (MD, evaluation, forces) runs a device kernel on a GPU
// (src/ops/radial_net_elements.h: a row's whole net in one thread, nothing of size rows x width
// written but the outputs), for nets of at most 8 layers of at most 128 units (MLIP_KERNELS=device:
// the same on the CPU).
#pragma once

#include <torch/script.h>

namespace mlip {

/// The operator through the dispatcher (with autograd).
std::tuple<torch::Tensor, torch::Tensor> tanh_net(const torch::Tensor& x, at::TensorList params,
                                                  at::IntArrayRef residual);

/// Does nothing; model loaders and builders call it so that static links keep the registration.
void link_radial_net_operator();

}  // namespace mlip
