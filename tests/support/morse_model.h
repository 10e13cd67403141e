// A Morse pair potential written against the model contract (common/include/mlip/model/model.h), built
// from C++ with Module::define like every mlip architecture. Tests use it where an exact,
// hand-checkable energy is wanted; it is not one of the production architectures.
#pragma once

#include <string>
#include <vector>

#include "mlip/model/model_metadata.h"

namespace mlip::testing {

// E_i = sum_j 1/2 D_ij [exp(-2a(r-r0)) - 2 exp(-a(r-r0))] fc(r) + shift_i, fc = (cos(pi r/rc)+1)/2.
inline Model make_morse_model(const std::vector<std::string>& species, double cutoff,
                              torch::Dtype dtype = torch::kFloat64) {
  const int64_t n = static_cast<int64_t>(species.size());
  const auto opts = torch::TensorOptions().dtype(dtype);
  torch::jit::Module m("__torch__.mlip.testing.Morse");
  m.register_attribute("training", c10::BoolType::get(), false);
  m.register_attribute("cutoff", c10::FloatType::get(), cutoff);
  m.register_buffer("depth", (0.5 + 0.1 * torch::arange(n * n, opts)).reshape({n, n}));
  m.register_buffer("shift", -1.0 - torch::arange(n, opts));
  m.register_attribute("alpha", c10::FloatType::get(), 1.3);
  m.register_attribute("r0", c10::FloatType::get(), 1.6);
  m.define(R"(
def forward(self, species: Tensor, edge_index: Tensor, edge_vectors: Tensor, n_centers: int) -> Tensor:
    r = torch.sqrt((edge_vectors * edge_vectors).sum(1))
    d = self.depth[species[edge_index[0]], species[edge_index[1]]]
    x = torch.exp(-self.alpha * (r - self.r0))
    fc = 0.5 * (torch.cos(r * (3.141592653589793 / self.cutoff)) + 1.0)
    pair = 0.5 * d * (x * x - 2.0 * x) * fc
    e = torch.zeros([n_centers], dtype=edge_vectors.dtype, device=edge_vectors.device)
    return e.index_add(0, edge_index[0], pair) + self.shift[species[:n_centers]]
)");
  ModelMetadata meta;
  meta.architecture = "morse_test";
  meta.species = species;
  meta.cutoff = cutoff;
  meta.dtype = dtype == torch::kFloat32 ? "float32" : "float64";
  return Model(m, meta, torch::kCPU);
}

}  // namespace mlip::testing
