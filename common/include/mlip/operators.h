// mlip's LibTorch operators (torch.ops.mlip.*), which models call: tanh_net (mlip/radial_net.h),
// edge_outer_sum and its family (mlip/edge_contraction.h), tabulated_contraction
// (mlip/tabulated_embedding.h). They register themselves when their object files are linked in;
// anything that loads or builds a model through plain torch::jit calls link_operators() once so
// that a static link keeps them. Python: torch.ops.load_library("<build>/lib/libmlip_ops.so").
#pragma once

namespace mlip {

void link_operators();

}  // namespace mlip
