// se_e2_a's environment of each edge as one operator with its derivatives written out:
//
//   torch.ops.mlip.se_environment(v, avg, std, rcut_smth, rcut) -> (radial, env)
//     v    (E, 3)  edge vectors
//     avg  (E,)    the radial shift of each edge's centre species, or (0,): none
//     std  (E, 2)  [std_r, std_a] of each edge's centre species
//   -> radial = (s - avg) / std_r (E,) and env = [radial, s v / (r std_a)] (E, 4), with r = |v|,
//      s = sw(u) / r, u = clamp((r - rcut_smth) / (rcut - rcut_smth), 0, 1) and
//      sw(u) = u^3 (-6 u^2 + 15 u - 10) + 1 (DeePMD's smooth switch).
//
// Why: a force loss differentiates the environment's backward pass again, and autograd's formulas
// for it are about a hundred small passes over the edges in a training step (kernels, on a GPU,
// each one launched); here each derivative is one pass. The backward,
// se_environment_backward(g_radial, g_env, v, avg, std, rcut_smth, rcut) -> dv, is itself
// differentiable (se_environment_second: along the incoming gradients and v in one pass, whose own
// derivatives are autograd's of its ATen formulation): derivatives of any order with respect to v.
// No gradient reaches avg and std (statistics: an error if they require one).
// Device kernels (src/ops/se_environment_elements.h: one edge each, on the CPU and a GPU, kept in
// a CUDA graph's recording); the ATen formulations with MLIP_KERNELS=aten.
#pragma once

#include <tuple>

#include <torch/script.h>

namespace mlip {

/// The operator through the dispatcher (with autograd).
std::tuple<torch::Tensor, torch::Tensor> se_environment(const torch::Tensor& v, const torch::Tensor& avg,
                                                        const torch::Tensor& std, double rcut_smth, double rcut);

/// The same with plain ATen operations in the form se_e2_a's TorchScript had (the tests' reference).
std::tuple<torch::Tensor, torch::Tensor> se_environment_reference(const torch::Tensor& v, const torch::Tensor& avg,
                                                                  const torch::Tensor& std, double rcut_smth,
                                                                  double rcut);

/// Does nothing; model loaders and builders call it so that static links keep the registration.
void link_se_environment_operator();

}  // namespace mlip
