// The edge tensor product of MACE-like layers fused with the sum over neighbours, as one operator,
// so that a layer keeps no (edges x paths x channels) tensors for autograd:
//
//   torch.ops.mlip.equivariant_message(x, s, w, path, center, neighbor, n_out) -> msg
//     msg[c, k, u] = sum_{e: center[e] = c} w[e, path[k], u] * sum_a s[e, a, k] x[neighbor[e], a, u]
//
//     x (N, A, C) node features (A components, C channels), s (E, A, K) the edges' couplings (for
//     MACE: the spherical harmonics contracted with the Wigner 3j symbols of each path, K output
//     components in all), w (E, P, C) the edges' path weights, path (K,) the path of each output
//     component, of one floating dtype; center (E,) in [0, n_out), neighbor (E,) in [0, N).
//
// Composed of aten operations, a layer gathers x per edge, multiplies by s and by the expanded
// weights and scatters: four (E, K, C) arrays held for autograd and about a dozen passes over
// them. Here the CPU kernel makes one pass over the edges each way and keeps only its inputs.
// Its backward is a second operator, torch.ops.mlip.equivariant_message_backward(g, x, s, w, path,
// center, neighbor) -> [gx, gs, gw], a CPU kernel too; the message being trilinear, the backward of
// that backward (a force loss) is these two operators again with one operand substituted, so
// every order of derivatives runs on the kernels. On a GPU the device kernels run
// (equivariant_message_elements.h in libmlip_cuda_ops.so: one thread per output element, each sum
// in edge order, memory of the operands' order), or the aten formulations (mlip/ops/operators.h's
// KernelChoice).
// With several LibTorch threads both kernels split their work by the node each sum goes into (the
// gradient in two passes: the edges' own gradients, then the neighbours'), each sum in edge order:
// the results are bitwise those of one thread.
//
// Registered when this library is loaded (part of mlip::model); Python needs
// torch.ops.load_library("<build>/lib/libmlip_ops.so") before torch.jit.load of a model using it.
#pragma once

#include <torch/script.h>

namespace mlip {

/// The operator through the dispatcher (with autograd).
torch::Tensor equivariant_message(const torch::Tensor& x, const torch::Tensor& s, const torch::Tensor& w,
                                  const torch::Tensor& path, const torch::Tensor& center,
                                  const torch::Tensor& neighbor, int64_t n_out);

/// The same with plain aten operations (the tests' reference).
torch::Tensor equivariant_message_reference(const torch::Tensor& x, const torch::Tensor& s, const torch::Tensor& w,
                                            const torch::Tensor& path, const torch::Tensor& center,
                                            const torch::Tensor& neighbor, int64_t n_out);

/// Does nothing; model loaders and builders call it so that static links keep the registration.
void link_equivariant_message_operator();

}  // namespace mlip
