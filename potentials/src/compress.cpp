// Compressed se_e2_a (see compress_model in mlip/potentials.h).
//
// Each embedding net G_t: x -> R^M (x = s(r) / std_r, one scalar per edge) is sampled on a
// uniform grid x_k = k h, k = 0..n, with its first and second derivatives (autograd through
// the model's own embedding() method). On [x_k, x_k+1] the table holds the quintic with those
// six values at both ends, so the tabulated G is C2 and its error falls as h^6; the grid is
// halved until the largest error at the quarter points of every bin is below the tolerance.
// The grid starts at x0, the smallest input of a neighbour at the cutoff (0, or with `sel`
// -avg/std_r: the operator gets x - x0), and ends at the largest input any pair of species gives
// at options.min_distance; the operator refuses inputs beyond it.
#include <algorithm>
#include <cmath>
#include <limits>

#include <torch/csrc/autograd/autograd.h>

#include "builder.h"
#include "mlip/error.h"
#include "mlip/potentials.h"
#include "mlip/ops/operators.h"
#include "mlip/ops/radial_net.h"
#include "mlip/ops/tabulated_embedding.h"

namespace mlip {
namespace {

void require_compressible(const torch::jit::Module& base, const ModelMetadata& meta) {
  if (meta.architecture != "se_e2_a") {
    throw Error("compress: only se_e2_a models can be compressed (this one is " + meta.architecture + ")");
  }
  if (meta.hyperparameters.contains("compression")) throw Error("compress: the model is already compressed");
  for (const char* method : {"environment", "embedding", "energies"}) {
    if (!base.find_method(method)) {
      throw Error(std::string("compress: the model has no ") + method +
                  "() method: it was exported by an mlip that could not compress models; export it again "
                  "from its checkpoint (mlip-trainer export CHECKPOINT -o model.pt)");
    }
  }
}

// The tables come from the model's embedding() method; its forward evaluates the nets with
// mlip::tanh_net. Models written before 2026-12-06 whose first embedding layer keeps or doubles its
// width (1 or 2 units) had an embedding() of tanh(x W / 2 + b) in that layer: with the parameters
// at hand (a trainable module: a checkpoint) the method is compared with the nets, and a model where
// they differ is refused; a frozen one (whose weights are constants in its code) of such a layer
// is sent to its checkpoint.
void require_embedding_is_its_nets(const torch::jit::Module& base, const ModelMetadata& meta, int64_t n_nets) {
  std::vector<int64_t> widths = {1};
  for (const auto& w : meta.hyperparameters.at("embedding")) widths.push_back(w.get<int64_t>());
  const std::vector<int64_t> residual = detail::residual_kinds(widths);
  if (residual.empty() || residual[0] == 0) return;
  if (!base.hasattr("emb_w0")) {
    throw Error("compress: the model's first embedding layer has " + std::to_string(widths[1]) +
                " units, where models written by an mlip before 2026-12-06 had a wrong embedding() method, and "
                "a frozen model's weights cannot be checked against it; compress from its checkpoint "
                "(mlip-trainer compress CHECKPOINT_DIR -o model-compressed.pt)");
  }
  torch::NoGradGuard no_grad;
  torch::jit::Module m = base;
  const torch::Tensor w0 = base.attr("emb_w0").toTensor();
  const torch::Tensor x = torch::linspace(-1.0, 3.0, 9, w0.options());
  const double tol = w0.scalar_type() == torch::kFloat32 ? 1e-4 : 1e-10;
  for (int64_t t = 0; t < n_nets; ++t) {
    std::vector<torch::Tensor> params;
    for (std::size_t l = 0; l + 1 < widths.size(); ++l)
      for (const char* kind : {"emb_w", "emb_b"}) params.push_back(base.attr(kind + std::to_string(l)).toTensor()[t]);
    const torch::Tensor want = std::get<0>(tanh_net(x, params, residual));
    const torch::Tensor got = m.get_method("embedding")({x.unsqueeze(1), t}).toTensor();
    const double diff = (got - want).abs().max().item<double>() / std::max(1.0, want.abs().max().item<double>());
    if (!(diff <= tol)) {
      throw Error(c10::str("compress: the model's embedding() method differs from its embedding net ", t, " (by ", diff,
                           "): a model written by an mlip before 2026-12-06 with a first embedding layer of 1 or 2 "
                           "units, whose embedding() was wrong there; compress a model trained by this mlip"));
    }
  }
}

// The largest (or smallest) embedding input of a neighbour at distance r, over all centre and
// neighbour species (s(r)/r falls with r: at min_distance the table's upper end, at the cutoff its
// lower end).
double extreme_input(const torch::jit::Module& base, int64_t n_species, double r, torch::Dtype dtype, bool largest) {
  torch::jit::Module m = base;   // get_method is not const; the module is shared, not copied
  double x = largest ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  for (int64_t c = 0; c < n_species; ++c) {
    for (int64_t n = 0; n < n_species; ++n) {
      const torch::Tensor species = torch::tensor({c, n}, torch::kInt64);
      const torch::Tensor edge_index = torch::tensor({int64_t{0}, int64_t{1}}, torch::kInt64).reshape({2, 1});
      const torch::Tensor vectors = torch::tensor({r, 0.0, 0.0}, torch::dtype(dtype)).reshape({1, 3});
      const auto out = m.get_method("environment")({species, edge_index, vectors}).toTuple();
      const double v = out->elements()[0].toTensor()[0].item<double>();
      x = largest ? std::max(x, v) : std::min(x, v);
    }
  }
  return x;
}

// G, dG/dx and d2G/dx2 of every net at x (K,): (n_nets, K, M) each (derivatives only if asked).
struct Samples {
  torch::Tensor g, g1, g2;
};

Samples sample(const torch::jit::Module& base, const torch::Tensor& x, int64_t n_nets, bool derivatives) {
  torch::jit::Module m = base;
  std::vector<torch::Tensor> g, g1, g2;
  for (int64_t t = 0; t < n_nets; ++t) {
    torch::Tensor xi = x.unsqueeze(1).detach().requires_grad_(derivatives);
    const torch::Tensor gt = m.get_method("embedding")({xi, t}).toTensor();
    g.push_back(gt.detach());
    if (!derivatives) continue;
    // Each output depends on its own row of x only: one gradient per output column.
    std::vector<torch::Tensor> d1, d2;
    for (int64_t k = 0; k < gt.size(1); ++k) {
      const torch::Tensor first = torch::autograd::grad({gt.select(1, k).sum()}, {xi}, {}, true, true)[0];
      d1.push_back(first.detach().squeeze(1));
      d2.push_back(torch::autograd::grad({first.sum()}, {xi}, {}, true, false, true)[0].squeeze(1));
    }
    g1.push_back(torch::stack(d1, 1));
    g2.push_back(torch::stack(d2, 1));
  }
  Samples s{torch::stack(g), {}, {}};
  if (derivatives) {
    s.g1 = torch::stack(g1);
    s.g2 = torch::stack(g2);
  }
  return s;
}

// Quintic Hermite coefficients per bin: (n_nets, bins, 6, M), in powers of t = x / h - k.
torch::Tensor hermite_table(const Samples& s, double h) {
  const int64_t n = s.g.size(1) - 1;
  auto lo = [n](const torch::Tensor& v) { return v.narrow(1, 0, n); };
  auto hi = [n](const torch::Tensor& v) { return v.narrow(1, 1, n); };
  const torch::Tensor c0 = lo(s.g), c1 = lo(s.g1) * h, c2 = lo(s.g2) * (h * h / 2);
  const torch::Tensor a = hi(s.g) - c0 - c1 - c2, b = hi(s.g1) * h - c1 - 2 * c2, c = hi(s.g2) * (h * h) - 2 * c2;
  const torch::Tensor c3 = 10 * a - 4 * b + c / 2, c4 = -15 * a + 7 * b - c, c5 = 6 * a - 3 * b + c / 2;
  return torch::stack({c0, c1, c2, c3, c4, c5}, 2).contiguous();
}

// Largest |tabulated - exact| over the quarter points of every bin, relative to max |G|. It
// bounds the error of G; forces use dG/dx, whose error is one order of h larger (h^5) and is
// checked by the tests against the uncompressed model's forces, not here.
double table_error(const torch::jit::Module& base, const torch::Tensor& table, double x0, double h) {
  const int64_t n_nets = table.size(0), bins = table.size(1);
  double err = 0.0, scale = 1e-300;
  for (double q : {0.25, 0.5, 0.75}) {
    const torch::Tensor x = (x0 + (torch::arange(bins, torch::kFloat64) + q) * h).to(table.scalar_type());
    const torch::Tensor exact = sample(base, x, n_nets, false).g;   // (nets, bins, M)
    torch::Tensor poly = table.select(2, 5);
    for (int64_t p = 4; p >= 0; --p) poly = table.select(2, p) + q * poly;
    err = std::max(err, (poly - exact).abs().max().item<double>());
    scale = std::max(scale, exact.abs().max().item<double>());
  }
  return err / scale;
}

// forward() and, where the base model has them, forward_grouped() (mlip/model/grouped_graph.h): the
// table takes every edge at once, so only the energies see the grouping.
// With `sel`, the table starts at x0 and the empty slots' part is added (se_e2_a.cpp's padding()).
std::string compressed_sums(bool shifted) {
  return std::string(R"(
    radial, env, net = self.base.environment(species, edge_index, edge_vectors)
    t_sum = mlip_ops.tabulated_contraction(radial)") + (shifted ? " - self.table_x0" : "") + R"(, env, edge_index[0], net, self.table,
                                           self.table_step, self.table_r_min, n_centers)
)" + (shifted ? "    t_sum = t_sum + self.base.padding(species, edge_index[0], net, n_centers)\n" : "");
}

torch::jit::Module compressed_module(const torch::jit::Module& base, const torch::Tensor& table, double x0,
                                     double step, double r_min) {
  const bool shifted = base.find_method("padding").has_value();
  torch::jit::Module m("__torch__.mlip.SeE2ACompressed");
  m.register_attribute("training", c10::BoolType::get(), false);
  m.register_module("base", base.clone());
  m.register_buffer("table", table);
  m.register_attribute("table_step", c10::FloatType::get(), step);
  m.register_attribute("table_r_min", c10::FloatType::get(), r_min);
  if (shifted) m.register_attribute("table_x0", c10::FloatType::get(), x0);
  const bool repulsion = base.find_method("repulsion").has_value();
  std::string source = "def forward(self, species: Tensor, edge_index: Tensor, edge_vectors: Tensor, n_centers: int)"
                       " -> Tensor:" + compressed_sums(shifted) + "    return self.base.energies(species, t_sum, n_centers)" +
                       (repulsion ? " + self.base.repulsion(species, edge_index, edge_vectors, n_centers)\n" : "\n");
  if (base.find_method("energies_grouped")) {
    source += "\ndef forward_grouped(self, species: Tensor, edge_index: Tensor, edge_vectors: Tensor, n_centers: int, "
              "center_groups: List[int], edge_groups: List[int]) -> Tensor:" + compressed_sums(shifted) +
              "    return self.base.energies_grouped(species, t_sum, center_groups)" +
              (repulsion ? " + self.base.repulsion_all_edges(species, edge_index, edge_vectors, n_centers)\n" : "\n");
  }
  m.define(source, std::make_shared<detail::MlipOpsResolver>());
  m.eval();
  return m;
}

}  // namespace

torch::jit::Module compress_model(const torch::jit::Module& base, ModelMetadata& metadata,
                                  const CompressOptions& options, CompressReport* report) {
  require_compressible(base, metadata);
  link_operators();
  if (!(options.min_distance >= 0.0)) throw Error(c10::str("compress: --min-distance must be > 0 (", options.min_distance, ")"));
  if (!(options.tolerance > 0.0 && std::isfinite(options.tolerance))) {
    throw Error(c10::str("compress: --tolerance must be a positive number (", options.tolerance, ")"));
  }
  if (options.max_bins < 64) throw Error("compress: max_bins must be >= 64");
  double r_min = options.min_distance;
  if (!(r_min > 0)) {
    const double shortest = metadata.provenance.value("shortest_training_distance", 0.0);
    if (!(shortest > 0)) {
      throw Error("compress: the model does not say how close atoms came in its training data; give the "
                  "shortest neighbour distance to tabulate (--min-distance, A)");
    }
    r_min = 0.75 * shortest;
  }
  if (!(r_min < metadata.cutoff)) {
    throw Error(c10::str("compress: --min-distance ", r_min, " A is not below the cutoff ", metadata.cutoff, " A"));
  }
  const torch::Dtype dtype = metadata.torch_dtype();
  const auto ns = static_cast<int64_t>(metadata.species.size());
  const int64_t n_nets = metadata.hyperparameters.value("type_one_side", true) ? ns : ns * ns;
  require_embedding_is_its_nets(base, metadata, n_nets);
  const double x_max = extreme_input(base, ns, r_min, dtype, true);
  const double x0 = base.find_method("padding") ? extreme_input(base, ns, metadata.cutoff, dtype, false) : 0.0;
  const double eps = dtype == torch::kFloat32 ? 1.2e-7 : 2.2e-16;
  const double tolerance = std::max(options.tolerance, 100 * eps);
  torch::Tensor table;
  double step = 0.0, error = std::numeric_limits<double>::infinity();
  for (int64_t bins = 64; bins <= options.max_bins && error > tolerance; bins *= 2) {
    step = (x_max - x0) / static_cast<double>(bins);
    const torch::Tensor grid = (x0 + torch::arange(bins + 1, torch::kFloat64) * step).to(dtype);
    table = hermite_table(sample(base, grid, n_nets, true), step);
    error = table_error(base, table, x0, step);
  }
  if (error > tolerance) {
    throw Error(c10::str("compress: ", table.size(1), " bins per net leave a table error of ", error,
                         " (relative), above the tolerance ", tolerance,
                         "; a larger --min-distance shortens the table"));
  }
  metadata.hyperparameters["compression"] = {{"min_distance", r_min}, {"bins", table.size(1)}, {"step", step}, {"x0", x0},
                                             {"max_error", error}, {"tolerance", tolerance}};
  if (report != nullptr) {
    *report = CompressReport{r_min, step, error, table.size(1), n_nets, table.size(3),
                             static_cast<double>(table.numel() * table.element_size()) / (1 << 20)};
  }
  return compressed_module(base, table, x0, step, r_min);
}

}  // namespace mlip
