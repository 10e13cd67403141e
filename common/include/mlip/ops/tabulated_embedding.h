// The operator of compressed se_e2_a models: embedding nets replaced by tables, fused with the
// descriptor contraction, so that the (edges x M) embedding matrix is never stored.
//
//   torch.ops.mlip.tabulated_contraction(x, env, center, net, table, step, r_min, n_centers)
//     x      (E,)      the embedding's input of each edge (se_e2_a: s(r) / std_r)
//     env    (E, 4)    the edge's environment row
//     center (E,)      int64 centre node of each edge, in [0, n_centers)
//     net    (E,)      int64 embedding net of each edge
//     table  (n_nets, n_bins, 6, M)  quintic polynomial coefficients: on bin k, with
//            t = x / step - k in [0, 1), G_m(x) = sum_p table[net, k, p, m] t^p
//     step   bin width in x; the table covers x in [0, n_bins * step]
//     r_min  the shortest neighbour distance the table was made for (A), for the error message
//   -> T (n_centers, 4, M),  T_i = sum_{edges e of i} env_e (x) G_net(e)(x_e)
//
// An edge with x beyond the table (a neighbour closer than the table was made for) is an error,
// never an extrapolation. Gradients flow to x and env (not to the table: compressed models are
// for inference); the backward is not itself differentiable.
//
// The operator is registered when this library is loaded (it is part of mlip::model, which every
// model loader links). Python: torch.ops.load_library("<build>/lib/libmlip_ops.so") before
// torch.jit.load of a compressed model.
#pragma once

#include <torch/script.h>

namespace mlip {

/// T from the operator's inputs with plain ATen operations on any device (gathers each edge's
/// coefficients: memory grows with edges x M). The CPU kernel is checked against it, and it is
/// what the operator runs on devices without a kernel of their own (CUDA).
torch::Tensor tabulated_contraction_reference(const torch::Tensor& x, const torch::Tensor& env,
                                              const torch::Tensor& center, const torch::Tensor& net,
                                              const torch::Tensor& table, double step, double r_min,
                                              int64_t n_centers);

/// Does nothing; Model::load calls it so that static links keep this file's registration.
void link_tabulated_operator();

/// The operator itself (through the dispatcher, with autograd).
torch::Tensor tabulated_contraction(const torch::Tensor& x, const torch::Tensor& env, const torch::Tensor& center,
                                    const torch::Tensor& net, const torch::Tensor& table, double step, double r_min,
                                    int64_t n_centers);

}  // namespace mlip
