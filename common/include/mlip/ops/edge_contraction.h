// The descriptor contraction of se_e2_a-like models as operators, so that the (edges x M)
// embedding matrix goes into each centre's sum in one pass, without a dense (centres x slots) copy:
//
//   torch.ops.mlip.edge_outer_sum(env, g, center, n_centers) -> T (n_centers, A, M)
//       T_c = sum_{edges e with center[e] = c} env_e (x) g_e
//   torch.ops.mlip.edge_contract_g(env, t, center)   -> (E, M),  out_e = env_e^T t_{center[e]}
//   torch.ops.mlip.edge_contract_env(g, t, center)   -> (E, A),  out_e = t_{center[e]} g_e
//
//     env (E, A), g (E, M), t (n, A, M) of one floating dtype; center (E,) int64 in [0, n).
//
// The three are one family: each one's derivatives are the other two (e.g. dT/denv contracted with
// a gradient dT is edge_contract_env(g, dT, center)), so derivatives of any order, as a force loss
// needs, stay inside it and inside LibTorch's autograd. Edges may come in any order. The CPU
// kernels make one pass over the edges; other devices (CUDA) run the ATen formulation below
// (memory grows with edges x A x M there).
//
// Registered when this library is loaded (part of mlip::model); Python needs
// torch.ops.load_library("<build>/lib/libmlip_ops.so") before torch.jit.load of a model using them.
#pragma once

#include <torch/script.h>

namespace mlip {

/// The operators through the dispatcher (with autograd).
torch::Tensor edge_outer_sum(const torch::Tensor& env, const torch::Tensor& g, const torch::Tensor& center,
                             int64_t n_centers);
torch::Tensor edge_contract_g(const torch::Tensor& env, const torch::Tensor& t, const torch::Tensor& center);
torch::Tensor edge_contract_env(const torch::Tensor& g, const torch::Tensor& t, const torch::Tensor& center);

/// The same with plain ATen operations on any device: the tests' reference, and the kernels of
/// devices without their own.
torch::Tensor edge_outer_sum_reference(const torch::Tensor& env, const torch::Tensor& g, const torch::Tensor& center,
                                       int64_t n_centers);
torch::Tensor edge_contract_g_reference(const torch::Tensor& env, const torch::Tensor& t, const torch::Tensor& center);
torch::Tensor edge_contract_env_reference(const torch::Tensor& g, const torch::Tensor& t, const torch::Tensor& center);

/// Does nothing; model loaders and builders call it so that static links keep the registration.
void link_edge_operators();

}  // namespace mlip
