// The message sums of PaiNN-like equivariant layers (scalar and l = 1 vector features) as one
// operator, so that a layer keeps no (edges x 3F) message tensors for autograd:
//
//   torch.ops.mlip.vector_message(phi, w, v, unit, center, neighbor, n_out) -> (ds, dv)
//     x_e = phi_{neighbor[e]} * w_e, split into (x_s, x_vv, x_vs), F values each
//     ds_c = sum_{e: center[e] = c} x_s                                   (n_out, F)
//     dv_c = sum_{e: center[e] = c} v_{neighbor[e]} x_vv + unit_e (x) x_vs  (n_out, 3, F)
//
//     phi (N, 3F) node terms, w (E, 3F) edge filters, v (N, 3, F) vector features, unit (E, 3)
//     edge directions, of one floating dtype; center (E,) in [0, n_out), neighbor (E,) in [0, N).
//
// Why: composed of aten operations, each layer's autograd graph holds the gathered phi and v, the
// products and the vector messages, about 6 (E x 3F) tensors, and the forward and backward make
// about 20 passes over such arrays. Here the CPU kernel makes one pass over the edges each way; the
// operator keeps only its inputs. Its backward (gradients of phi, w, v and unit) is the CPU kernel
// when no graph is asked for (MD, a force evaluation), and the aten formulation otherwise (a force
// loss in training differentiates it again), so derivatives of any order are available. On a GPU
// the device kernels run both ways (vector_message_elements.h in libmlip_cuda_ops.so), or the aten
// formulation (mlip/ops/operators.h's KernelChoice). The gradient kernel makes one serial pass
// (the scatter into neighbours has no owner per thread): LAMMPS and the trainer run one thread per
// rank.
//
// Registered when this library is loaded (part of mlip::model); Python needs
// torch.ops.load_library("<build>/lib/libmlip_ops.so") before torch.jit.load of a model using it.
#pragma once

#include <torch/script.h>

namespace mlip {

/// The operator through the dispatcher (with autograd).
std::tuple<torch::Tensor, torch::Tensor> vector_message(const torch::Tensor& phi, const torch::Tensor& w,
                                                        const torch::Tensor& v, const torch::Tensor& unit,
                                                        const torch::Tensor& center, const torch::Tensor& neighbor,
                                                        int64_t n_out);

/// The same with plain aten operations (the tests' reference).
std::tuple<torch::Tensor, torch::Tensor> vector_message_reference(const torch::Tensor& phi, const torch::Tensor& w,
                                                                  const torch::Tensor& v, const torch::Tensor& unit,
                                                                  const torch::Tensor& center,
                                                                  const torch::Tensor& neighbor, int64_t n_out);

/// Does nothing; model loaders and builders call it so that static links keep the registration.
void link_vector_message_operator();

}  // namespace mlip
