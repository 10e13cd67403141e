// compare_checkpoints A B RTOL: exits 0 if every parameter of A/model.pt and B/model.pt agrees
// to RTOL (relative to the largest entry of that parameter), printing the worst difference.
#include <torch/script.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "mlip/ops/operators.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CHECKPOINT_A CHECKPOINT_B RTOL\n", argv[0]);
    return 2;
  }
  const double rtol = std::atof(argv[3]);
  mlip::link_operators();   // the models call torch.ops.mlip
  auto a = torch::jit::load(std::string(argv[1]) + "/model.pt");
  auto b = torch::jit::load(std::string(argv[2]) + "/model.pt");
  std::vector<std::pair<std::string, at::Tensor>> pa, pb;
  for (const auto& p : a.named_parameters()) pa.emplace_back(p.name, p.value);
  for (const auto& p : b.named_parameters()) pb.emplace_back(p.name, p.value);
  if (pa.size() != pb.size()) {
    std::fprintf(stderr, "parameter counts differ: %zu vs %zu\n", pa.size(), pb.size());
    return 1;
  }
  double worst = 0;
  std::string worst_name;
  int n = 0;
  for (std::size_t i = 0; i < pa.size(); ++i) {
    if (pa[i].first != pb[i].first) {
      std::fprintf(stderr, "parameter lists differ at %s\n", pa[i].first.c_str());
      return 1;
    }
    const double scale = std::max(pa[i].second.abs().max().item<double>(), 1e-300);
    const double diff = (pa[i].second - pb[i].second).abs().max().item<double>() / scale;
    if (diff > worst) {
      worst = diff;
      worst_name = pa[i].first;
    }
    ++n;
  }
  std::printf("%d parameters compared; worst relative difference %.3g (%s); tolerance %.3g\n", n, worst,
              worst_name.c_str(), rtol);
  return n > 0 && worst <= rtol ? 0 : 1;
}
