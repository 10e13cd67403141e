// Physics of every architecture, in float32 and float64: invariance under rotation, translation
// and permutation; forces and virials against finite differences; smoothness at the cutoff;
// extensivity; periodic images; and the exported file evaluated by Python's torch.jit.load.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>

#include <ATen/Parallel.h>
#include <torch/csrc/autograd/autograd.h>

#include "mlip/ops/activation.h"
#include "mlip/ops/edge_contraction.h"
#include "mlip/data/elements.h"
#include "mlip/error.h"
#include "mlip/model/graph_capture.h"
#include "mlip/model/grouped_graph.h"
#include "mlip/model/heads.h"
#include "mlip/model/kernel_profile.h"
#include "mlip/model/message_passing.h"
#include "mlip/graph/neighbor_list.h"
#include "mlip/potentials.h"
#include "mlip/ops/radial_net.h"
#include "mlip/ops/se_environment.h"
#include "mlip/ops/tabulated_embedding.h"
#include "mlip/ops/vector_message.h"
#include "mlip/ops/bessel_radial.h"
#include "mlip/ops/vector_polynomials.h"
#include "mlip/o3.h"
#include "mlip/ops/equivariant_message.h"
#include "mlip/ops/symmetric_contraction.h"
#include "mlip/ops/operators.h"
#include "support/reference.h"
#include "support/source_dir.h"
#include "support/temp_dir.h"
#include "../common/src/ops/host_exp.h"

namespace mlip {
namespace {

namespace fs = std::filesystem;
using testing::evaluate_reference;

// Each path: the CPU kernels, and the device kernels' per-element code run on the CPU (what a GPU
// runs, mlip/ops/operators.h's KernelChoice).
const std::vector<KernelChoice> kKernelPaths = {KernelChoice::usual, KernelChoice::device_kernels};

struct Case {
  std::string architecture;  // or "se_e2_a_two_side": se_e2_a with type_one_side: false; "..._sel": with sel
                             // (DeePMD-kit's shifted environment, empty slots counted); "mace_nonlinear":
                             // MACE-MH's shape (non-linear blocks, edge irreps, Agnesi, envelope deferred);
                             // "mace_heads": three heads, forward() the second's
  torch::Dtype dtype;
  bool repulsion = false;  // with the ZBL prior, switched on below 1.6 A (sample() has pairs from 0.8 A)
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.architecture << (c.dtype == torch::kFloat32 ? "/float32" : "/float64") << (c.repulsion ? "/zbl" : "");
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  return info.param.architecture + (info.param.dtype == torch::kFloat32 ? "_float32" : "_float64") +
         (info.param.repulsion ? "_zbl" : "");
}

constexpr double kCutoff = 4.0;

// A small but non-trivial model: random weights and random data statistics.
BuiltModel build(const Case& c, uint64_t seed = 7, int layers = 2) {
  ModelSpec spec;
  const bool se = c.architecture.rfind("se_e2_a", 0) == 0;
  const bool mace = c.architecture.rfind("mace", 0) == 0;
  spec.architecture = se ? "se_e2_a" : mace ? "mace" : c.architecture;
  spec.species = {"H", "O"};
  spec.cutoff = kCutoff;
  spec.dtype = c.dtype == torch::kFloat32 ? "float32" : "float64";
  spec.seed = seed;
  if (se) {
    spec.hyperparameters = {{"embedding", {8, 16}}, {"axis_neurons", 4}, {"fitting", {16, 16}},
                            {"rcut_smth", 2.0}, {"neighbor_norm", 10.0}};
    if (c.architecture.find("two_side") != std::string::npos) spec.hyperparameters["type_one_side"] = false;
    if (c.architecture.find("_sel") != std::string::npos) spec.hyperparameters["sel"] = {23, 17};
    // Residual first layers: the embedding's 1 -> 2 doubles, the fitting's 8 -> 8 keeps its width.
    if (c.architecture.find("_residual") != std::string::npos)
      spec.hyperparameters.update({{"embedding", {2, 4}}, {"axis_neurons", 2}, {"fitting", {8, 16}}});
  } else if (mace) {
    spec.hyperparameters = {{"num_channels", 4}, {"max_L", 1},          {"max_ell", 2},
                            {"correlation", 3},  {"num_interactions", layers}, {"radial_MLP", {8}},
                            {"MLP_irreps", "4x0e"}, {"avg_num_neighbors", 6.0}};
    if (c.architecture == "mace_nonlinear")
      spec.hyperparameters.update({{"interaction_first", "RealAgnosticResidualNonLinearInteractionBlock"},
                                   {"interaction", "RealAgnosticResidualNonLinearInteractionBlock"},
                                   {"edge_irreps", "3x0e+3x1o"}, {"use_edge_irreps_first", true},
                                   {"apply_cutoff", false}, {"distance_transform", "Agnesi"},
                                   {"pair_repulsion", true}});
    if (c.architecture == "mace_heads")   // with ZBL: its pair energy is scaled by each head's scale
      spec.hyperparameters.update({{"heads", {"a", "b", "c"}}, {"head", "b"}, {"pair_repulsion", true}});
  } else {
    spec.hyperparameters = {{"features", 8}, {"layers", layers}, {"radial_basis", 6}};
  }
  if (c.repulsion) spec.repulsion = "zbl";
  BuiltModel built = build_model(spec);
  torch::NoGradGuard no_grad;  // only while setting buffers; never around evaluation
  if (c.repulsion) {
    built.module.attr("rep_inner").toTensor().fill_(1.6);
    built.module.setattr("rep_max", 1.6);
  }
  torch::Tensor shift = built.module.attr("energy_shift").toTensor(), scale = built.module.attr("energy_scale").toTensor();
  if (shift.dim() == 2) {   // heads: each its own E0s and scale
    const torch::Tensor by_head = torch::arange(shift.size(1), torch::kFloat64);
    shift.copy_(torch::tensor({-13.6, -432.1}).unsqueeze(1) + 0.37 * by_head);
    scale.copy_(torch::tensor({0.7, 1.3}).unsqueeze(1) * (1 + 0.2 * by_head));
  } else {
    shift.copy_(torch::tensor({-13.6, -432.1}));
    scale.copy_(torch::tensor({0.7, 1.3}));
  }
  if (se) {
    built.module.attr("env_std").toTensor().copy_(torch::tensor({{0.3, 0.2}, {0.25, 0.15}}));
    if (built.module.hasattr("env_avg")) built.module.attr("env_avg").toTensor().copy_(torch::tensor({0.08, 0.11}));
  }
  if (c.architecture == "mace_nonlinear")  // the learnt density in play (beta 0 at first)
    for (int t = 0; t < layers; ++t) built.module.attr("l" + std::to_string(t) + "_beta").toTensor().fill_(0.7 + t);
  return built;
}

Model make_model(const Case& c, uint64_t seed = 7) {
  BuiltModel built = build(c, seed);
  return Model(built.module, built.metadata, torch::kCPU);
}

Structure sample(unsigned seed, bool periodic = true) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Structure s;
  s.cell.lattice = {{{6.0, 0, 0}, {0.8, 5.7, 0}, {-0.5, 0.6, 6.3}}};
  s.cell.pbc = {periodic, periodic, periodic};
  while (s.size() < 14) {
    const Vec3 f = {u(rng), u(rng), u(rng)};
    Vec3 x{};
    for (int d = 0; d < 3; ++d)
      x[d] = f[0] * s.cell.lattice[0][d] + f[1] * s.cell.lattice[1][d] + f[2] * s.cell.lattice[2][d];
    Structure t = s;
    t.positions.push_back(x);
    t.numbers.push_back(s.size() % 3 == 0 ? 8 : 1);
    NeighborOptions o;
    o.min_distance = 0.8;
    try {
      build_neighbor_list(t, 1.0, o);
    } catch (const Error&) {
      continue;
    }
    s = t;
  }
  return s;
}

class Potential : public ::testing::TestWithParam<Case> {
 protected:
  bool f32() const { return GetParam().dtype == torch::kFloat32; }
  // Relative tolerance for comparing two evaluations of the same physics.
  double same() const { return f32() ? 2e-5 : 1e-11; }
};

double max_abs(const std::vector<Vec3>& f) {
  double m = 0;
  for (const auto& v : f) m = std::max({m, std::abs(v[0]), std::abs(v[1]), std::abs(v[2])});
  return m;
}

TEST_P(Potential, InvariantUnderRotationTranslationPermutation) {
  const Model model = make_model(GetParam());
  const Structure s = sample(1);
  const auto ref = evaluate_reference(model, s);
  ASSERT_GT(max_abs(ref.forces), 1e-3);

  // Rotation of positions and cell (about an arbitrary axis) and a translation.
  const double a = 0.7, b = -1.1, c = 2.3;
  const Mat3 rx = {{{1, 0, 0}, {0, std::cos(a), -std::sin(a)}, {0, std::sin(a), std::cos(a)}}};
  const Mat3 rz = {{{std::cos(c), -std::sin(c), 0}, {std::sin(c), std::cos(c), 0}, {0, 0, 1}}};
  const Mat3 ry = {{{std::cos(b), 0, std::sin(b)}, {0, 1, 0}, {-std::sin(b), 0, std::cos(b)}}};
  auto apply = [](const Mat3& m, const Vec3& v) {
    return Vec3{dot(m[0], v), dot(m[1], v), dot(m[2], v)};
  };
  auto rotate = [&](const Vec3& v) { return apply(rz, apply(ry, apply(rx, v))); };
  Structure t = s;
  for (auto& x : t.positions) x = rotate(x);
  for (auto& x : t.positions) x = {x[0] + 3.1, x[1] - 7.2, x[2] + 0.4};
  for (auto& row : t.cell.lattice) row = rotate(row);
  const auto rot = evaluate_reference(model, t);
  EXPECT_NEAR(rot.energy, ref.energy, same() * std::abs(ref.energy));
  const double fscale = max_abs(ref.forces);
  for (std::size_t i = 0; i < s.size(); ++i) {
    const Vec3 expected = rotate(ref.forces[i]);
    for (int d = 0; d < 3; ++d) EXPECT_NEAR(rot.forces[i][d], expected[d], 10 * same() * fscale + 1e-12);
  }

  // Permutation of the atoms.
  std::vector<std::size_t> perm(s.size());
  for (std::size_t i = 0; i < perm.size(); ++i) perm[i] = (i * 5 + 3) % perm.size();
  Structure p = s;
  for (std::size_t i = 0; i < perm.size(); ++i) {
    p.positions[i] = s.positions[perm[i]];
    p.numbers[i] = s.numbers[perm[i]];
  }
  const auto per = evaluate_reference(model, p);
  EXPECT_NEAR(per.energy, ref.energy, same() * std::abs(ref.energy));
  for (std::size_t i = 0; i < perm.size(); ++i)
    for (int d = 0; d < 3; ++d) EXPECT_NEAR(per.forces[i][d], ref.forces[perm[i]][d], 10 * same() * fscale + 1e-12);
}

TEST_P(Potential, ForcesAreMinusFiniteDifferenceGradient) {
  const Model model = make_model(GetParam());
  const Structure s = sample(2);
  const auto ref = evaluate_reference(model, s);
  // MACE's random test model has large atom energies (third powers of its features) and small
  // forces: the energies' round-off, divided by h, would reach the tolerance; a larger step.
  const bool mace = GetParam().architecture.rfind("mace", 0) == 0;
  const double h = f32() ? (mace ? 1e-2 : 2e-3) : (mace ? 1e-4 : 1e-5);
  const double tol = f32() ? 2e-2 * max_abs(ref.forces) + 2e-3 : 1e-6 * max_abs(ref.forces) + 1e-9;
  for (std::size_t i = 0; i < s.size(); i += 3) {
    for (int d = 0; d < 3; ++d) {
      Structure p = s, m = s;
      p.positions[i][d] += h;
      m.positions[i][d] -= h;
      const double fd = -(evaluate_reference(model, p).energy - evaluate_reference(model, m).energy) / (2 * h);
      EXPECT_NEAR(ref.forces[i][d], fd, tol) << "atom " << i << " direction " << d;
    }
  }
}

TEST_P(Potential, VirialIsMinusFiniteStrainDerivative) {
  const Model model = make_model(GetParam());
  const Structure s = sample(3);
  const auto ref = evaluate_reference(model, s);
  const bool mace = GetParam().architecture.rfind("mace", 0) == 0;  // as above
  const double h = f32() ? (mace ? 1e-2 : 1e-3) : (mace ? 1e-5 : 1e-6);
  double scale = 0;
  for (const auto& row : ref.virial) scale = std::max({scale, std::abs(row[0]), std::abs(row[1]), std::abs(row[2])});
  ASSERT_GT(scale, 1e-4);
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) {
      auto strained = [&](double eps) {
        Structure t = s;
        auto apply = [&](Vec3& v) { v[b] += eps * v[a]; };
        for (auto& x : t.positions) apply(x);
        for (auto& row : t.cell.lattice) apply(row);
        return evaluate_reference(model, t).energy;
      };
      const double dE = (strained(h) - strained(-h)) / (2 * h);
      EXPECT_NEAR(ref.virial[a][b], -dE, (f32() ? 3e-2 : 1e-6) * scale) << a << b;
    }
  }
}

TEST_P(Potential, SmoothAtTheCutoff) {
  const Model model = make_model(GetParam());
  auto dimer = [&](double r) {
    Structure s;
    s.positions = {{0, 0, 0}, {r, 0, 0}};
    s.numbers = {8, 1};
    return evaluate_reference(model, s);
  };
  const double d = 1e-4;
  const auto inside = dimer(kCutoff - d), outside = dimer(kCutoff + d), isolated = dimer(50.0);
  EXPECT_NEAR(outside.energy, isolated.energy, 1e-12 * std::abs(isolated.energy));
  // Energy and force go to zero continuously as the neighbour reaches the cutoff.
  EXPECT_NEAR(inside.energy, outside.energy, f32() ? 1e-3 : 1e-7);
  EXPECT_LT(std::abs(inside.forces[0][0]), f32() ? 1e-3 : 1e-5);
  // ... and are not trivially zero further in.
  EXPECT_GT(std::abs(dimer(0.8 * kCutoff).forces[0][0]), 10 * std::abs(inside.forces[0][0]));
}

TEST_P(Potential, FarApartCopiesGiveTwiceTheEnergy) {
  const Model model = make_model(GetParam());
  const Structure one = sample(4, /*periodic=*/false);
  Structure two = one;
  for (std::size_t i = 0; i < one.size(); ++i) {
    two.positions.push_back({one.positions[i][0] + 40.0, one.positions[i][1], one.positions[i][2] - 25.0});
    two.numbers.push_back(one.numbers[i]);
  }
  const double e1 = evaluate_reference(model, one).energy, e2 = evaluate_reference(model, two).energy;
  EXPECT_NEAR(e2, 2 * e1, same() * std::abs(e2));
}

TEST_P(Potential, SplitAcrossPeriodicBoundaryEqualsWrapped) {
  const Model model = make_model(GetParam());
  const Structure wrapped = sample(5);
  Structure split = wrapped;
  // Move every other atom by a whole lattice vector combination: same periodic system.
  for (std::size_t i = 0; i < split.size(); i += 2) {
    const int n[3] = {static_cast<int>(i % 3) - 1, 1, -2};
    for (int d = 0; d < 3; ++d)
      for (int k = 0; k < 3; ++k) split.positions[i][d] += n[k] * split.cell.lattice[k][d];
  }
  const auto a = evaluate_reference(model, wrapped), b = evaluate_reference(model, split);
  EXPECT_NEAR(a.energy, b.energy, same() * std::abs(a.energy));
  for (std::size_t i = 0; i < wrapped.size(); ++i)
    for (int d = 0; d < 3; ++d) EXPECT_NEAR(a.forces[i][d], b.forces[i][d], 10 * same() * max_abs(a.forces) + 1e-12);
}

TEST_P(Potential, ExportedModelMatchesAndLoadsInPython) {
  const Model model = make_model(GetParam());
  const fs::path dir = fs::temp_directory_path() / ("mlip_test_potential_" + case_name({GetParam(), 0}));
  fs::create_directories(dir);
  const std::string path = (dir / "model.pt").string();
  ModelMetadata meta = model.metadata();
  export_frozen(const_cast<Model&>(model).module(), meta, path);
  const Model frozen = Model::load(path);
  EXPECT_EQ(frozen.metadata().architecture, build(GetParam()).metadata.architecture);
  const Structure s = sample(6);
  const auto a = evaluate_reference(model, s), b = evaluate_reference(frozen, s);
  for (std::size_t i = 0; i < s.size(); ++i) {
    EXPECT_NEAR(a.atom_energy[i], b.atom_energy[i], same() * std::abs(a.atom_energy[i]));
    for (int d = 0; d < 3; ++d) EXPECT_NEAR(a.forces[i][d], b.forces[i][d], 10 * same() * max_abs(a.forces) + 1e-12);
  }

#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "Python cannot load the AddressSanitizer build's libmlip_ops.so";
#endif
  // The Python of the torch package this build's LibTorch came from (cmake/MlipTorch.cmake).
  const std::string python = MLIP_TORCH_PYTHON;
  if (python.empty() || std::system((python + " -c 'import torch' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "no Python with the build's torch package (MLIP_TORCH_PYTHON='" << python << "')";
  }
  const NeighborList nl = build_neighbor_list(s, kCutoff);
  std::vector<int64_t> species;
  for (int z : s.numbers) species.push_back(z == 8 ? 1 : 0);
  nlohmann::json in = {{"species", species},
                       {"edge_index", {nl.centers, nl.neighbors}},
                       {"edge_vectors", nl.vectors},
                       {"n_centers", s.size()}};
  std::ofstream(dir / "in.json") << in.dump();
  const std::string cmd = python + " -W ignore " + mlip::testing::source_dir() + "/tests/python/torch_load.py " + path +
                          " " + (dir / "in.json").string() + " " + (dir / "out.json").string() + " " + MLIP_OPS_LIBRARY;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto out = nlohmann::json::parse(std::ifstream(dir / "out.json"));
  EXPECT_EQ(out["metadata"]["architecture"], build(GetParam()).metadata.architecture);
  ASSERT_EQ(out["energies"].size(), s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    // Same LibTorch, same frozen graph: identical up to summation order inside kernels.
    EXPECT_NEAR(out["energies"][i].get<double>(), b.atom_energy[i], same() * std::abs(b.atom_energy[i]));
  }
}

// Ghost exchange (mlip/model/message_passing.h) in one process: each periodic image a centre sees is a
// ghost node whose features come from its atom between layers, and whose feature gradients go
// back to it. Energies and edge gradients equal forward() on the periodic graph (where images are
// the atoms themselves), for 2 and 3 layers, with and without the pair repulsion.
TEST(MessagePassing, GhostExchangeEqualsForwardOnPeriodicImages) {
  const Structure s = sample(41);
  const NeighborList nl = build_neighbor_list(s, kCutoff);
  const auto n = static_cast<int64_t>(s.size());
  std::vector<int64_t> species, owner, edge_index(2 * nl.size());
  for (int z : s.numbers) species.push_back(z == 8 ? 1 : 0);
  std::map<std::pair<int64_t, std::array<int32_t, 3>>, int64_t> ghost;
  for (std::size_t e = 0; e < nl.size(); ++e) {
    int64_t node = nl.neighbors[e];
    if (nl.shifts[e] != std::array<int32_t, 3>{0, 0, 0}) {
      auto [it, added] = ghost.try_emplace({nl.neighbors[e], nl.shifts[e]}, n + static_cast<int64_t>(owner.size()));
      if (added) {
        owner.push_back(nl.neighbors[e]);
        species.push_back(species[nl.neighbors[e]]);
      }
      node = it->second;
    }
    edge_index[e] = nl.centers[e];
    edge_index[nl.size() + e] = node;
  }
  ASSERT_GT(owner.size(), s.size()) << "the cell must be small enough for many images";
  std::vector<double> vectors;
  for (const auto& r : nl.vectors) vectors.insert(vectors.end(), r.begin(), r.end());
  GraphView graph;
  graph.species = species.data();
  graph.n_nodes = static_cast<int64_t>(species.size());
  graph.edge_index = edge_index.data();
  graph.edge_index_stride = static_cast<int64_t>(nl.size());
  graph.edge_vectors = vectors.data();
  graph.n_edges = static_cast<int64_t>(nl.size());
  graph.n_centers = n;
  // The periodic graph: images are the atoms themselves.
  std::vector<int64_t> periodic_index(nl.centers);
  periodic_index.insert(periodic_index.end(), nl.neighbors.begin(), nl.neighbors.end());
  GraphView periodic = graph;
  periodic.n_nodes = n;
  periodic.edge_index = periodic_index.data();
  const torch::Tensor owners = torch::tensor(owner, torch::kInt64);
  FeatureExchange exchange;
  exchange.forward = [&](const torch::Tensor& owned) { return owned.index_select(0, owners); };
  exchange.reverse = [&](const torch::Tensor& g) { return torch::zeros({n, g.size(1)}, g.options()).index_add(0, owners, g); };

  for (const char* arch : {"painn", "mace", "mace_heads"}) {
  for (int layers : {2, 3}) {
    for (bool repulsion : {false, true}) {
      const BuiltModel built = build({arch, torch::kFloat64, repulsion}, 7, layers);
      const Model model(built.module, built.metadata, torch::kCPU);
      ASSERT_EQ(exchange_layers(model), layers);
      const ModelOutput direct = evaluate_graph(model, periodic);
      // Chunks of 1, 5 and 7 of the 14 centres recompute each layer in the backward pass; 0: one call.
      // On 2 threads the chunks run side by side.
      const int threads = at::get_num_threads();
      for (int t : {1, 2})
      for (int64_t chunk : {0, 1, 5, 7}) {
        SCOPED_TRACE(std::string(arch) + ", layers " + std::to_string(layers) + (repulsion ? ", repulsion" : "") +
                     ", chunk " + std::to_string(chunk) + ", threads " + std::to_string(t));
        at::set_num_threads(t);
        const ModelOutput out = evaluate_exchanging(model, graph, exchange, chunk);
        at::set_num_threads(threads);
        for (int64_t i = 0; i < n; ++i)
          EXPECT_NEAR(out.atom_energy[i].item<double>(), direct.atom_energy[i].item<double>(),
                      1e-10 * std::abs(direct.atom_energy[i].item<double>()));
        const double scale = direct.edge_grad.abs().max().item<double>();
        EXPECT_LT((out.edge_grad - direct.edge_grad).abs().max().item<double>(), 1e-10 * scale);
      }
      if (std::string(arch) == "mace_heads") {   // another head selected: mp_readout_heads
        Model chosen = model;
        chosen.select_head("c");
        const ModelOutput c_direct = evaluate_graph(chosen, periodic), c_out = evaluate_exchanging(chosen, graph, exchange, 5);
        EXPECT_GT((c_direct.atom_energy - direct.atom_energy).abs().max().item<double>(), 1e-6) << "head c is not b";
        EXPECT_TRUE(torch::allclose(c_out.atom_energy, c_direct.atom_energy, 1e-10, 1e-10));
        EXPECT_TRUE(torch::allclose(c_out.edge_grad, c_direct.edge_grad, 1e-10, 1e-10 * c_direct.edge_grad.abs().max().item<double>()));
      }
    }
  }
  }
}

// A multi-head MACE model: each head is the single-head model with that head's readouts and
// energy buffers (the rest shared); forward_heads takes each node's own head; fine-tuning keeps
// heads by name, starts new ones from the source's default head, and refuses a multi-head source
// for a model without heads.
ModelInput structure_input(const testing::StructureGraph& g) {
  ModelInput in;
  in.species = torch::tensor(g.species);
  in.edge_index = torch::tensor(g.index).reshape({2, g.ne});
  in.edge_vectors = torch::from_blob(const_cast<Vec3*>(g.nl.vectors.data()), {g.ne, 3}, torch::kFloat64).clone();
  in.n_centers = g.n;
  return in;
}

// forward_heads of `built` with head `head` of every node (or per node), energies and edge gradients.
ModelOutput with_heads(BuiltModel& built, const ModelInput& base, const torch::Tensor& node_head) {
  ModelInput in = base;
  in.node_head = node_head;
  return evaluate_module(built.module, in, EdgeGradient::value);
}

TEST(MaceHeads, EachHeadIsTheSingleHeadModelWithItsWeights) {
  BuiltModel heads = build({"mace_heads", torch::kFloat64});
  BuiltModel one = build({"mace", torch::kFloat64}, 11);
  const Model model(heads.module, heads.metadata, torch::kCPU);
  const Structure st = sample(23);
  const testing::StructureGraph g(model, st);
  const ModelInput in = structure_input(g);
  const auto weights = named_weights(heads.module);
  std::vector<ModelOutput> per_head;
  for (int64_t h = 0; h < 3; ++h) {
    SCOPED_TRACE("head " + std::to_string(h));
    {
      torch::NoGradGuard no_grad;
      for (auto& [name, t] : named_weights(one.module)) {
        const auto axis = heads.head_axis.find(name);
        t.copy_(axis == heads.head_axis.end() ? weights.at(name) : weights.at(name).select(axis->second, h));
      }
    }
    const ModelOutput single = evaluate_module(one.module, in, EdgeGradient::value);
    per_head.push_back(with_heads(heads, in, torch::full({g.n}, h, torch::kInt64)));
    EXPECT_TRUE(torch::allclose(per_head[h].atom_energy, single.atom_energy, 1e-12, 1e-12));
    EXPECT_TRUE(torch::allclose(per_head[h].edge_grad, single.edge_grad, 1e-12, 1e-12));
  }
  EXPECT_GT((per_head[0].atom_energy - per_head[2].atom_energy).abs().max().item<double>(), 1e-3) << "heads differ";
  // forward(): the default head "b"; nodes of mixed heads each get their own head's energy.
  const ModelOutput plain = model.evaluate(in, true);
  EXPECT_TRUE(torch::equal(plain.atom_energy, per_head[1].atom_energy));
  const torch::Tensor mixed_head = torch::arange(g.n, torch::kInt64) % 3;
  const ModelOutput mixed = with_heads(heads, in, mixed_head);
  for (int64_t i = 0; i < g.n; ++i)
    EXPECT_DOUBLE_EQ(mixed.atom_energy[i].item<double>(), per_head[mixed_head[i].item<int64_t>()].atom_energy[i].item<double>());
  // A head selected on the model (pair_style mlip ... head c, mlip-trainer test --head c).
  Model chosen = model;
  chosen.select_head("c");
  EXPECT_TRUE(torch::equal(chosen.evaluate(in, true).atom_energy, per_head[2].atom_energy));
  for (const auto& [name, message] : std::vector<std::pair<std::string, std::string>>{
           {"x", "head x is not one of the model's heads (a, b, c)"}}) {
    try {
      chosen.select_head(name);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
  // The exported model keeps forward_heads (the trainer's evaluation of a fine-tuned file).
  testing::TempDir dir("mlip_test_mace_heads");
  const std::string path = (dir.path / "heads.pt").string();
  export_frozen(heads.module, heads.metadata, path);
  const Model loaded = Model::load(path);
  ModelInput again = in;
  again.node_head = mixed_head;
  EXPECT_TRUE(torch::allclose(loaded.evaluate(again, false).atom_energy, mixed.atom_energy, 1e-12, 1e-12));
  // A model without heads is told it has none.
  BuiltModel plain_model = build({"mace", torch::kFloat64});
  Model no_heads(plain_model.module, plain_model.metadata, torch::kCPU);
  EXPECT_THROW(no_heads.select_head("a"), Error);
  try {
    with_heads(plain_model, in, mixed_head);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no heads"), std::string::npos) << e.what();
  }
}

TEST(MaceHeads, FineTuningKeepsHeadsByNameAndStartsNewOnesFromTheDefault) {
  BuiltModel two = build({"mace_heads", torch::kFloat64}, 9);
  ModelSpec single_spec;   // the same model with one output
  single_spec.architecture = "mace";
  single_spec.species = two.metadata.species;
  single_spec.cutoff = kCutoff;
  single_spec.seed = 5;
  single_spec.hyperparameters = two.metadata.hyperparameters;
  for (const char* key : {"heads", "head"}) single_spec.hyperparameters.erase(key);
  BuiltModel single = build_model(single_spec);
  {
    torch::NoGradGuard no_grad;
    single.module.attr("energy_shift").toTensor().copy_(torch::tensor({-3.1, -7.4}));
    single.module.attr("energy_scale").toTensor().copy_(torch::tensor({0.9, 1.2}));
  }
  const Model single_model(single.module, single.metadata, torch::kCPU);
  const testing::StructureGraph g(single_model, sample(29));
  const ModelInput in = structure_input(g);
  auto heads_of = [&](BuiltModel& m, int64_t h) { return with_heads(m, in, torch::full({g.n}, h, torch::kInt64)); };
  auto same = [](const ModelOutput& a, const ModelOutput& b) {
    return torch::allclose(a.atom_energy, b.atom_energy, 1e-12, 1e-12) && torch::allclose(a.edge_grad, b.edge_grad, 1e-12, 1e-12);
  };
  // A single-head source: every head of the target starts as it (mace-torch's multi-head fine-tuning).
  transfer_weights(two, named_weights(single.module), single.metadata);
  const ModelOutput source = evaluate_module(single.module, in, EdgeGradient::value);
  for (int64_t h = 0; h < 3; ++h) EXPECT_TRUE(same(heads_of(two, h), source)) << "head " << h;
  // Heads by name: a, b, c -> c, new, a (default c); "new" starts from the source's default, b.
  BuiltModel three = build({"mace_heads", torch::kFloat64}, 13);
  {
    torch::NoGradGuard no_grad;
    for (auto& [name, t] : named_weights(three.module))
      if (three.head_axis.count(name)) t.normal_();   // three heads that differ
  }
  ModelSpec spec;
  spec.architecture = "mace";
  spec.species = three.metadata.species;
  spec.cutoff = kCutoff;
  spec.hyperparameters = three.metadata.hyperparameters;
  spec.hyperparameters["heads"] = {"c", "new", "a"};
  spec.hyperparameters["head"] = "c";
  BuiltModel kept = build_model(spec);
  transfer_weights(kept, named_weights(three.module), three.metadata);
  EXPECT_TRUE(same(heads_of(kept, 0), heads_of(three, 2)));
  EXPECT_TRUE(same(heads_of(kept, 1), heads_of(three, 1)));
  EXPECT_TRUE(same(heads_of(kept, 2), heads_of(three, 0)));
  EXPECT_FALSE(same(heads_of(kept, 0), heads_of(kept, 2)));
  // A multi-head source for a model without heads: which to keep must be said.
  try {
    transfer_weights(single, named_weights(three.module), three.metadata);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("the source model has the heads a, b, c: list those to keep"), std::string::npos)
        << e.what();
  }
  // Bad heads hyperparameters are named.
  for (const auto& [hp, message] : std::vector<std::pair<nlohmann::json, std::string>>{
           {{{"heads", {"a", "a"}}}, "hyperparameter 'heads' lists 'a' twice"},
           {{{"heads", {"a", "b"}}, {"head", "x"}}, "hyperparameter 'head' 'x' is not one of the model's heads"}}) {
    ModelSpec bad = spec;
    bad.hyperparameters.erase("head");
    bad.hyperparameters.update(hp);
    try {
      build_model(bad);
      ADD_FAILURE() << "no error for " << hp.dump();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// Fine-tuning MACE into other species (an added one, another order): the species both models have
// keep their function exactly (the flat weights with a block per species moved block by block and
// rescaled where the forward normalises by the species count: embeddings, species-dependent skip
// connections, the non-linear blocks' species embeddings; the contraction's weights per species).
TEST(MaceSpecies, FineTuningIntoOtherSpeciesKeepsTheSharedOnes) {
  for (const char* arch : {"mace", "mace_nonlinear"}) {
    BuiltModel source = build({arch, torch::kFloat64}, 9);
    ModelSpec spec;
    spec.architecture = "mace";
    spec.species = {"O", "C", "H"};
    spec.cutoff = kCutoff;
    spec.seed = 4;
    spec.hyperparameters = source.metadata.hyperparameters;
    BuiltModel target = build_model(spec);
    EXPECT_EQ(transfer_weights(target, named_weights(source.module), source.metadata), std::vector<std::string>{"C"});
    const Structure water_like = sample(29);   // H and O only
    const Model from(source.module, source.metadata, torch::kCPU), to(target.module, target.metadata, torch::kCPU);
    const testing::StructureGraph gs(from, water_like), gt(to, water_like);
    const ModelOutput a = evaluate_module(source.module, structure_input(gs), EdgeGradient::value);
    const ModelOutput b = evaluate_module(target.module, structure_input(gt), EdgeGradient::value);
    EXPECT_TRUE(torch::allclose(a.atom_energy, b.atom_energy, 1e-12, 1e-12)) << arch << ": " << (a.atom_energy - b.atom_energy).abs().max();
    EXPECT_TRUE(torch::allclose(a.edge_grad, b.edge_grad, 1e-12, 1e-12)) << arch;
    // and back into the two species: the same weights again
    BuiltModel back = build({arch, torch::kFloat64}, 21);
    transfer_weights(back, named_weights(target.module), target.metadata);
    for (const auto& [name, t] : named_weights(source.module))
      EXPECT_TRUE(torch::allclose(named_weights(back.module).at(name), t, 1e-14, 1e-14)) << arch << " " << name;
  }
}

// training.freeze: descriptor on MACE keeps everything but the layers' readouts (before, MACE
// marked nothing, and a frozen fine-tuning trained every weight).
TEST(MaceSpecies, DescriptorIsAllButTheReadouts) {
  for (const char* arch : {"mace", "mace_nonlinear"}) {
    const BuiltModel built = build({arch, torch::kFloat64}, 9);
    int readouts = 0;
    for (const auto& p : built.module.named_parameters(/*recurse=*/false)) {
      const bool readout = p.name.find("_ro_w") != std::string::npos || p.name.find("_ro1_w") != std::string::npos ||
                           p.name.find("_ro2_w") != std::string::npos;
      readouts += readout;
      EXPECT_EQ(built.descriptor.count(p.name), readout ? 0u : 1u) << arch << " " << p.name;
    }
    EXPECT_GE(readouts, 2) << arch << ": a readout per layer";
    EXPECT_EQ(built.descriptor.count("embedding_w"), 1u) << arch;
  }
}

// A rank that owns no atom (an empty subdomain) has an empty graph, and must still take part in
// every exchange: each layer but the last forwards once and reverses once.
TEST(MessagePassing, EmptyGraphStillExchanges) {
  const BuiltModel built = build({"painn", torch::kFloat64, true}, 7, 3);
  const Model model(built.module, built.metadata, torch::kCPU);
  const int64_t width = exchange_feature_width(model);
  EXPECT_EQ(width, 4 * 8);   // s (F) and v (3 x F), F = 8
  int forwards = 0, reverses = 0;
  FeatureExchange exchange;
  exchange.forward = [&](const torch::Tensor& owned) {
    EXPECT_EQ(owned.size(0), 0);
    EXPECT_EQ(owned.size(1), width);
    ++forwards;
    return torch::zeros({0, width}, torch::kFloat64);
  };
  exchange.reverse = [&](const torch::Tensor& g) {
    EXPECT_EQ(g.size(0), 0);
    ++reverses;
    return torch::zeros({0, width}, torch::kFloat64);
  };
  const std::vector<int64_t> none;
  GraphView graph;
  graph.species = none.data();
  graph.edge_index = none.data();
  const ModelOutput out = evaluate_exchanging(model, graph, exchange);
  EXPECT_EQ(out.atom_energy.numel(), 0);
  EXPECT_EQ(out.edge_grad.size(0), 0);
  EXPECT_EQ(forwards, 2);
  EXPECT_EQ(reverses, 2);
}

// The compressed-model operator: the CPU kernels and the device kernels' code against the
// reference's ATen operations, forward and backward (gradients of a random linear function of T),
// in both dtypes, for widths M the device forward's threads split evenly (4 columns each) and not.
TEST(TabulatedContraction, CpuKernelsMatchTheReference) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32})
  for (const auto path_choice : kKernelPaths)
  for (const int64_t m : {12, 1, 3, 5, 7}) {
    SCOPED_TRACE(path_choice == KernelChoice::usual ? "CPU kernels" : "device kernels");
    SCOPED_TRACE("M = " + std::to_string(m));
    const KernelChoiceScope use(path_choice);
    torch::manual_seed(5);
    const int64_t n_edges = 300, n_centers = 17, n_nets = 3, bins = 40;
    const double step = 0.05;
    const auto opt = torch::dtype(dtype);
    const torch::Tensor table = torch::randn({n_nets, bins, 6, m}, opt);
    torch::Tensor x = (torch::rand({n_edges}, opt) * (bins * step)).requires_grad_(true);
    torch::Tensor env = torch::randn({n_edges, 4}, opt).requires_grad_(true);
    const torch::Tensor center = torch::randint(0, n_centers, {n_edges}, torch::kInt64);
    const torch::Tensor net = torch::randint(0, n_nets, {n_edges}, torch::kInt64);
    const torch::Tensor w = torch::randn({n_centers, 4, m}, opt);
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-4;
    const torch::Tensor a = tabulated_contraction(x, env, center, net, table, step, 0.5, n_centers);
    const auto ga = torch::autograd::grad({(a * w).sum()}, {x, env});
    const torch::Tensor b = tabulated_contraction_reference(x, env, center, net, table, step, 0.5, n_centers);
    const auto gb = torch::autograd::grad({(b * w).sum()}, {x, env});
    // float32: the absolute tolerance scaled by the largest value (x's gradients cancel: float32's
    // rounding is relative to the terms)
    const auto close = [tol, dtype](const torch::Tensor& got, const torch::Tensor& want) {
      const double scale = dtype == torch::kFloat32 ? std::max(1.0, want.abs().max().item<double>()) : 1.0;
      return torch::allclose(got, want, tol, tol * scale);
    };
    EXPECT_TRUE(close(a, b)) << dtype;
    EXPECT_TRUE(close(ga[0], gb[0])) << dtype;
    EXPECT_TRUE(close(ga[1], gb[1])) << dtype;
  }
}

// The compressed-model operator on threads: with centres in order (as neighbour lists give them)
// the forward and backward on 1, 2 and 3 threads are bitwise the same; with centres out of order
// too (the forward then runs on one thread).
TEST(TabulatedContraction, ThreadsGiveBitwiseTheResultOfOneThread) {
  const int threads = at::get_num_threads();
  torch::manual_seed(7);
  const int64_t n_edges = 5000, n_centers = 97, n_nets = 2, bins = 40, m = 16;
  const double step = 0.05;
  const auto opt = torch::dtype(torch::kFloat64);
  const torch::Tensor table = torch::randn({n_nets, bins, 6, m}, opt);
  const torch::Tensor x0 = torch::rand({n_edges}, opt) * (bins * step), env0 = torch::randn({n_edges, 4}, opt);
  const torch::Tensor net = torch::randint(0, n_nets, {n_edges}, torch::kInt64);
  const torch::Tensor w = torch::randn({n_centers, 4, m}, opt);
  const torch::Tensor unsorted = torch::randint(0, n_centers, {n_edges}, torch::kInt64);
  for (const torch::Tensor& center : {std::get<0>(unsorted.sort()), unsorted}) {
    std::vector<torch::Tensor> results;
    for (const int t : {1, 2, 3}) {
      at::set_num_threads(t);
      const torch::Tensor x = x0.clone().requires_grad_(true), env = env0.clone().requires_grad_(true);
      const torch::Tensor y = tabulated_contraction(x, env, center, net, table, step, 0.5, n_centers);
      const auto g = torch::autograd::grad({(y * w).sum()}, {x, env});
      for (const torch::Tensor& r : {y.detach(), g[0], g[1]}) results.push_back(r);
    }
    for (std::size_t k = 3; k < results.size(); ++k) EXPECT_TRUE(torch::equal(results[k], results[k % 3])) << k;
  }
  at::set_num_threads(threads);
}

// se_e2_a's contraction operators (mlip/ops/edge_contraction.h): values, first and second derivatives
// against the ATen reference, in both dtypes.
TEST(EdgeContraction, OperatorsAndTheirDerivativesMatchTheReference) {
  const int threads = at::get_num_threads();
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    for (const int64_t n_edges : {300, 5000}) {
      torch::manual_seed(11);
      const int64_t n = 23, a = 4, m = 9;
      const auto opt = torch::dtype(dtype);
      const torch::Tensor env = torch::randn({n_edges, a}, opt).requires_grad_(true);
      const torch::Tensor g = torch::randn({n_edges, m}, opt).requires_grad_(true);
      const torch::Tensor t = torch::randn({n, a, m}, opt).requires_grad_(true);
      const torch::Tensor center = torch::randint(0, n, {n_edges}, torch::kInt64);
      const double tol = dtype == torch::kFloat64 ? 1e-11 : 2e-3;
      // f(inputs) -> output; compares the output, its gradients and the gradients of a function of those.
      auto compare = [&](auto op, auto ref, std::vector<torch::Tensor> in, const char* name) {
        const torch::Tensor ya = op(), yb = ref();
        ASSERT_TRUE(torch::allclose(ya, yb, tol, tol)) << name << " " << dtype;
        const torch::Tensor w = torch::randn_like(ya);
        const auto ga = torch::autograd::grad({(ya * w).sum()}, in, {}, true, true);
        const auto gb = torch::autograd::grad({(yb * w).sum()}, in, {}, true, true);
        torch::Tensor sa = torch::zeros({}, opt), sb = torch::zeros({}, opt);
        for (std::size_t k = 0; k < in.size(); ++k) {
          ASSERT_TRUE(torch::allclose(ga[k], gb[k], tol, tol)) << name << " d/d input " << k << " " << dtype;
          sa = sa + (ga[k] * ga[k]).sum();
          sb = sb + (gb[k] * gb[k]).sum();
        }
        const auto ha = torch::autograd::grad({sa}, in), hb = torch::autograd::grad({sb}, in);
        for (std::size_t k = 0; k < in.size(); ++k)
          EXPECT_TRUE(torch::allclose(ha[k], hb[k], 10 * tol, 10 * tol)) << name << " 2nd d/d input " << k << " " << dtype;
      };
      compare([&] { return edge_outer_sum(env, g, center, n); },
              [&] { return edge_outer_sum_reference(env, g, center, n); }, {env, g}, "edge_outer_sum");
      compare([&] { return edge_contract_g(env, t, center); },
              [&] { return edge_contract_g_reference(env, t, center); }, {env, t}, "edge_contract_g");
      compare([&] { return edge_contract_env(g, t, center); },
              [&] { return edge_contract_env_reference(g, t, center); }, {g, t}, "edge_contract_env");
    }
  }
  at::set_num_threads(threads);
}

TEST(EdgeContraction, BadIndicesAndShapesAreErrors) {
  const torch::Tensor env = torch::ones({3, 4}, torch::kFloat64), g = torch::ones({3, 5}, torch::kFloat64);
  const torch::Tensor center = torch::tensor({0, 1, 2}, torch::kInt64);
  auto message = [](auto f) -> std::string {
    try {
      f();
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    }
    return "no error";
  };
  EXPECT_NE(message([&] { edge_outer_sum(env, g, center, 2); }).find("edge_outer_sum: a centre index outside [0, 2)"),
            std::string::npos);
  EXPECT_NE(message([&] { edge_contract_g(env, torch::ones({2, 4, 5}, torch::kFloat64), center); })
                .find("edge_contract_g: a centre index outside [0, 2)"),
            std::string::npos);
  EXPECT_NE(message([&] { edge_outer_sum(env, g.to(torch::kFloat32), center, 3); }).find("must be both float32 or both float64"),
            std::string::npos);
  EXPECT_NE(message([&] { edge_contract_env(g, torch::ones({3, 4, 6}, torch::kFloat64), center); })
                .find("edge_contract_env: t (n, A, M) expected"),
            std::string::npos);
}

// PaiNN's message sums (mlip/ops/vector_message.h) against the aten reference: values, the CPU
// kernel's gradients (a backward without a graph, as in MD) and second derivatives (a backward
// with a graph, as a force loss needs), in both dtypes, with edges in random order.
TEST(VectorMessage, KernelsAndDerivativesMatchTheReference) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32})
  for (const auto path_choice : kKernelPaths) {
    SCOPED_TRACE(path_choice == KernelChoice::usual ? "CPU kernels" : "device kernels");
    const KernelChoiceScope use(path_choice);
    torch::manual_seed(5);
    const int64_t nodes = 31, n_out = 19, f = 7, edges = 600;
    const auto opt = torch::dtype(dtype);
    const std::vector<torch::Tensor> in = {
        torch::randn({nodes, 3 * f}, opt).requires_grad_(true), torch::randn({edges, 3 * f}, opt).requires_grad_(true),
        torch::randn({nodes, 3, f}, opt).requires_grad_(true), torch::randn({edges, 3}, opt).requires_grad_(true)};
    const torch::Tensor center = torch::randint(0, n_out, {edges}, torch::kInt64);
    const torch::Tensor neighbor = torch::randint(0, nodes, {edges}, torch::kInt64);
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-4;
    const auto [sa, va] = vector_message(in[0], in[1], in[2], in[3], center, neighbor, n_out);
    const auto [sb, vb] = vector_message_reference(in[0], in[1], in[2], in[3], center, neighbor, n_out);
    ASSERT_TRUE(torch::allclose(sa, sb, tol, tol) && torch::allclose(va, vb, tol, tol)) << dtype;
    const torch::Tensor ws = torch::randn_like(sa), wv = torch::randn_like(va);
    const torch::Tensor la = (sa * ws).sum() + (va * wv).sum(), lb = (sb * ws).sum() + (vb * wv).sum();
    const auto kernel = torch::autograd::grad({la}, in, {}, true, false);
    const auto ga = torch::autograd::grad({la}, in, {}, true, true);
    const auto gb = torch::autograd::grad({lb}, in, {}, true, true);
    torch::Tensor qa = torch::zeros({}, opt), qb = torch::zeros({}, opt);
    for (std::size_t k = 0; k < in.size(); ++k) {
      EXPECT_TRUE(torch::allclose(kernel[k], gb[k], tol, tol)) << "kernel d/d input " << k << " " << dtype;
      EXPECT_TRUE(torch::allclose(ga[k], gb[k], tol, tol)) << "d/d input " << k << " " << dtype;
      qa = qa + (ga[k] * ga[k]).sum();
      qb = qb + (gb[k] * gb[k]).sum();
    }
    const auto ha = torch::autograd::grad({qa}, in), hb = torch::autograd::grad({qb}, in);
    for (std::size_t k = 0; k < in.size(); ++k)
      EXPECT_TRUE(torch::allclose(ha[k], hb[k], 10 * tol, 10 * tol)) << "2nd d/d input " << k << " " << dtype;
  }
}

// An operator (one output) against its aten reference: values, the CPU kernel's gradients (a
// backward without a graph, as in MD) and first, second (as a force loss needs) and third
// derivatives through a graph with respect to every floating input.
void expect_operator_matches_reference(const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& op,
                                       const std::function<torch::Tensor(const std::vector<torch::Tensor>&)>& ref,
                                       const std::vector<torch::Tensor>& in, double tol) {
  const torch::Tensor a = op(in), b = ref(in);
  ASSERT_TRUE(torch::allclose(a, b, tol, tol)) << (a - b).abs().max().item<double>();
  const torch::Tensor weight = torch::randn_like(a);
  const torch::Tensor la = (a * weight).sum(), lb = (b * weight).sum();
  const auto kernel = torch::autograd::grad({la}, in, {}, true, false);
  const auto ga = torch::autograd::grad({la}, in, {}, true, true);
  const auto gb = torch::autograd::grad({lb}, in, {}, true, true);
  torch::Tensor qa = torch::zeros({}, a.options()), qb = torch::zeros({}, a.options());
  for (std::size_t k = 0; k < in.size(); ++k) {
    EXPECT_TRUE(torch::allclose(kernel[k], gb[k], tol, tol)) << "kernel d/d input " << k;
    EXPECT_TRUE(torch::allclose(ga[k], gb[k], tol, tol)) << "d/d input " << k;
    qa = qa + (ga[k] * ga[k]).sum();
    qb = qb + (gb[k] * gb[k]).sum();
  }
  // Second derivatives without a graph (the kernels, as training runs them), then with one.
  const auto hk = torch::autograd::grad({qa}, in, {}, true, false);
  const auto ha = torch::autograd::grad({qa}, in, {}, true, true), hb = torch::autograd::grad({qb}, in, {}, true, true);
  torch::Tensor ra = torch::zeros({}, a.options()), rb = torch::zeros({}, a.options());
  for (std::size_t k = 0; k < in.size(); ++k) {
    EXPECT_TRUE(torch::allclose(hk[k], hb[k], 10 * tol, 10 * tol)) << "2nd d/d input " << k << " (kernels)";
    EXPECT_TRUE(torch::allclose(ha[k], hb[k], 10 * tol, 10 * tol)) << "2nd d/d input " << k;
    ra = ra + (ha[k] * ha[k]).sum();
    rb = rb + (hb[k] * hb[k]).sum();
  }
  const auto ta = torch::autograd::grad({ra}, in), tb = torch::autograd::grad({rb}, in);
  for (std::size_t k = 0; k < in.size(); ++k) {
    const double scale = tb[k].abs().max().item<double>();
    EXPECT_TRUE(torch::allclose(ta[k], tb[k], 10 * tol, 10 * tol * scale)) << "3rd d/d input " << k;
  }
}

// MACE's edge tensor product with the neighbour sum (mlip/ops/equivariant_message.h).
double max_rel_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1e-300, a.abs().max().item<double>());
}

TEST(EquivariantMessage, KernelsAndDerivativesMatchTheReference) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32})
  for (const auto path_choice : kKernelPaths)
  for (const int64_t C : {5, 37}) {  // the CPU kernel's channel chunks: a part of one; two whole and a part
    SCOPED_TRACE(dtype);
    SCOPED_TRACE(path_choice == KernelChoice::usual ? "CPU kernels" : "device kernels");
    SCOPED_TRACE(C);
    const KernelChoiceScope use(path_choice);
    torch::manual_seed(6);
    const int64_t nodes = 23, n_out = 15, A = 4, K = 9, P = 4, edges = 300;
    const auto opt = torch::dtype(dtype);
    // s with zeros, as MACE's couplings have (the CPU kernels skip their terms)
    const torch::Tensor s = torch::randn({edges, A, K}, opt) * (torch::rand({edges, A, K}) > 0.4).to(dtype);
    const std::vector<torch::Tensor> in = {torch::randn({nodes, A, C}, opt).requires_grad_(true),
                                           s.requires_grad_(true),
                                           torch::randn({edges, P, C}, opt).requires_grad_(true)};
    const torch::Tensor path = torch::tensor({0, 1, 1, 1, 2, 3, 3, 3, 3}, torch::kInt64);
    const torch::Tensor center = torch::randint(0, n_out, {edges}, torch::kInt64);
    const torch::Tensor neighbor = torch::randint(0, nodes, {edges}, torch::kInt64);
    auto op = [&](const std::vector<torch::Tensor>& t) {
      return equivariant_message(t[0], t[1], t[2], path, center, neighbor, n_out);
    };
    auto ref = [&](const std::vector<torch::Tensor>& t) {
      return equivariant_message_reference(t[0], t[1], t[2], path, center, neighbor, n_out);
    };
    expect_operator_matches_reference(op, ref, in, dtype == torch::kFloat64 ? 1e-12 : 1e-4);
    // Only some operands asking for gradients (MD's first layer: not x), to second order: the
    // backward computes those alone.
    const std::vector<torch::Tensor> part = {in[0].detach(), in[1], in[2]};
    const auto l = (op(part) * op(part)).sum(), lr = (ref(part) * ref(part)).sum();
    const auto g = torch::autograd::grad({l}, {in[1], in[2]}, {}, true, true);
    const auto gr = torch::autograd::grad({lr}, {in[1], in[2]}, {}, true, true);
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-4;
    for (int i = 0; i < 2; ++i) EXPECT_LE(max_rel_difference(g[i], gr[i]), tol) << i;
    const auto h = torch::autograd::grad({(g[0] * g[0]).sum() + g[1].sum()}, {in[2]});
    const auto hr = torch::autograd::grad({(gr[0] * gr[0]).sum() + gr[1].sum()}, {in[2]});
    EXPECT_LE(max_rel_difference(h[0], hr[0]), tol);
  }
  const auto f64 = torch::dtype(torch::kFloat64);
  try {
    equivariant_message(torch::ones({3, 2, 4}, f64), torch::ones({2, 2, 3}, f64), torch::ones({2, 2, 4}, f64),
                        torch::tensor({0, 1, 2}, torch::kInt64), torch::tensor({0, 1}, torch::kInt64),
                        torch::tensor({0, 5}, torch::kInt64), 2);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("equivariant_message: a path index outside [0, 2)"), std::string::npos) << what;
  }
}

// The branch-free exp of the CPU's element loops (scaled_silu) against the C library's, over the
// whole range where it is not clamped, and its ends.
TEST(HostExp, MatchesTheLibrary) {
  using mlip::kernels::host_exp;
  double worst64 = 0, worst32 = 0;
  for (double x = -708.0; x <= 709.0; x += 0.0037) {
    const double e = std::exp(x);
    worst64 = std::max(worst64, std::abs(host_exp(x) - e) / e);
  }
  for (double x = -87.0; x <= 88.0; x += 0.00037) {
    const float xf = float(x);
    const double e = std::exp(double(xf));
    worst32 = std::max(worst32, std::abs(double(host_exp(xf)) - e) / e);
  }
  EXPECT_LE(worst64, 2.3e-16);
  EXPECT_LE(worst32, 1.2e-7);
  EXPECT_EQ(host_exp(-1000.0), host_exp(-708.0));  // clamped: a normal number, never 0 or inf
  EXPECT_EQ(host_exp(1000.0), host_exp(709.0));
  EXPECT_TRUE(std::isfinite(host_exp(1000.0)) && host_exp(-1000.0) > 0.0);
  EXPECT_EQ(host_exp(100.0f), host_exp(88.0f));
  EXPECT_TRUE(std::isfinite(host_exp(100.0f)) && host_exp(-100.0f) > 0.0f);
  EXPECT_EQ(host_exp(0.0), 1.0);
}

// The radial nets' activation (mlip/ops/activation.h): values and derivatives to third order.
TEST(ScaledSilu, KernelsAndDerivativesMatchTheReference) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32})
  for (const auto path_choice : kKernelPaths) {
    SCOPED_TRACE(dtype);
    SCOPED_TRACE(path_choice == KernelChoice::usual ? "CPU kernels" : "device kernels");
    const KernelChoiceScope use(path_choice);
    torch::manual_seed(5);
    const std::vector<torch::Tensor> in = {(torch::randn({37, 6}, torch::dtype(dtype)) * 4).requires_grad_(true)};
    auto op = [&](const std::vector<torch::Tensor>& t) { return scaled_silu(t[0], 1.679); };
    auto ref = [&](const std::vector<torch::Tensor>& t) { return scaled_silu_reference(t[0], 1.679); };
    expect_operator_matches_reference(op, ref, in, dtype == torch::kFloat64 ? 1e-12 : 1e-5);
  }
  try {
    scaled_silu(torch::ones({3}, torch::kInt64), 1.0);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("scaled_silu: float32 or float64"), std::string::npos);
  }
}

// se_e2_a's environment (mlip/ops/se_environment.h) on all three paths against the TorchScript
// form it replaced: values and derivatives to third order, with and without the radial shift, at
// edges inside the switch's inner radius, within the switch and beyond the cutoff.
TEST(SeEnvironment, KernelsAndDerivativesMatchTheReference) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32})
  for (const auto path_choice : {KernelChoice::usual, KernelChoice::device_kernels, KernelChoice::aten})
  for (const bool shifted : {false, true}) {
    SCOPED_TRACE(dtype);
    SCOPED_TRACE(path_choice == KernelChoice::usual ? "CPU" : path_choice == KernelChoice::aten ? "aten" : "device");
    SCOPED_TRACE(shifted ? "shifted" : "not shifted");
    const KernelChoiceScope use(path_choice);
    torch::manual_seed(9);
    const auto opt = torch::dtype(dtype);
    const int64_t edges = 53;
    torch::Tensor v = torch::randn({edges, 3}, torch::dtype(torch::kFloat64));
    v = v / v.norm(2, 1, true) * (torch::rand({edges, 1}, torch::dtype(torch::kFloat64)) * 6.4 + 0.8);   // |v| in [0.8, 7.2]
    // v and a factor p on the outputs: the incoming gradients then depend on p, so the second
    // derivative along them (what a force loss's parameter gradients take) is compared too
    const std::vector<torch::Tensor> in = {v.to(dtype).requires_grad_(true),
                                           (torch::rand({edges, 5}, opt) + 0.5).requires_grad_(true)};
    const torch::Tensor avg = shifted ? torch::rand({edges}, opt) * 0.3 : torch::zeros({0}, opt);
    const torch::Tensor std = torch::rand({edges, 2}, opt) + 0.5;
    const auto joined = [](const std::tuple<torch::Tensor, torch::Tensor>& out) {
      return torch::cat({std::get<0>(out).unsqueeze(1), std::get<1>(out)}, 1);
    };
    auto op = [&](const std::vector<torch::Tensor>& t) { return joined(se_environment(t[0], avg, std, 2.0, 6.0)) * t[1]; };
    auto ref = [&](const std::vector<torch::Tensor>& t) {
      return joined(se_environment_reference(t[0], avg, std, 2.0, 6.0)) * t[1];
    };
    expect_operator_matches_reference(op, ref, in, dtype == torch::kFloat64 ? 1e-12 : 1e-4);
  }
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto error_of = [](const std::function<void()>& f) {
    try {
      f();
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
    return std::string("no error");
  };
  const torch::Tensor v = torch::ones({4, 3}, f64), std = torch::ones({4, 2}, f64);
  EXPECT_NE(error_of([&] { se_environment(v, torch::zeros({0}, f64), torch::ones({4, 2}, f64).requires_grad_(), 1, 5); })
                .find("no gradient reaches avg and std"), std::string::npos);
  EXPECT_NE(error_of([&] { se_environment(v, torch::zeros({3}, f64), std, 1, 5); }).find("avg (E,) or (0,) expected"),
            std::string::npos);
  EXPECT_NE(error_of([&] { se_environment(v, torch::zeros({0}, f64), std, 5, 5); })
                .find("0 <= rcut_smth < rcut expected"), std::string::npos);
  EXPECT_NE(error_of([&] { se_environment(v.to(torch::kFloat32), torch::zeros({0}, f64), std, 1, 5); })
                .find("operands of one dtype and device"), std::string::npos);
}

// Polynomials of 3-vectors (mlip/ops/vector_polynomials.h): MACE's spherical harmonics (l <= 4)
// against their aten evaluation, and the operator's values and derivatives to third order against
// the aten formulation, at vectors with zero components (powers 0 and 1 at 0).
TEST(VectorPolynomials, HarmonicsAndDerivativesMatchTheReference) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32})
  for (const auto path_choice : kKernelPaths) {
    SCOPED_TRACE(dtype);
    SCOPED_TRACE(path_choice == KernelChoice::usual ? "CPU kernels" : "device kernels");
    const KernelChoiceScope use(path_choice);
    torch::manual_seed(8);
    torch::Tensor v = torch::randn({41, 3}, torch::dtype(torch::kFloat64));
    v[3][0] = 0.0, v[4][1] = 0.0, v[4][2] = 0.0;
    v = v / v.norm(2, 1, true);
    const auto [terms, coefficients] = o3::spherical_harmonics_terms(4);
    const torch::Tensor sh = vector_polynomials(v.to(dtype), terms, coefficients, 25);
    EXPECT_LE((sh.to(torch::kFloat64) - o3::spherical_harmonics(4, v)).abs().max().item<double>(),
              dtype == torch::kFloat64 ? 1e-13 : 1e-5);
    const std::vector<torch::Tensor> in = {(v * 1.3).to(dtype).requires_grad_(true)};
    auto op = [&](const std::vector<torch::Tensor>& t) { return vector_polynomials(t[0], terms, coefficients, 25); };
    auto ref = [&](const std::vector<torch::Tensor>& t) {
      return vector_polynomials_reference(t[0], terms, coefficients, 25);
    };
    expect_operator_matches_reference(op, ref, in, dtype == torch::kFloat64 ? 1e-12 : 1e-4);
  }
  const auto [terms, coefficients] = o3::spherical_harmonics_terms(1);
  try {
    vector_polynomials(torch::ones({2, 3}, torch::kFloat64), terms, coefficients, 3);
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("vector_polynomials: a term's output outside [0, 3)"), std::string::npos) << what;
  }
}

// Vectors in a strided view (a transposed (3, E) tensor) give the values and gradients of the same
// vectors made contiguous, on every kernel path: the backward writes its gradient in u's shape,
// not in its strides.
TEST(VectorPolynomials, StridedVectorsGiveTheContiguousResults) {
  const auto [terms, coefficients] = o3::spherical_harmonics_terms(3);
  for (const auto path_choice : kKernelPaths) {
    SCOPED_TRACE(path_choice == KernelChoice::usual ? "CPU kernels" : "device kernels");
    const KernelChoiceScope use(path_choice);
    torch::manual_seed(9);
    const torch::Tensor rows = torch::randn({3, 29}, torch::kFloat64), w = torch::randn({29, 16}, torch::kFloat64);
    const torch::Tensor strided = rows.t().requires_grad_(true), dense = rows.t().contiguous().requires_grad_(true);
    ASSERT_FALSE(strided.is_contiguous());
    std::vector<torch::Tensor> grads;
    for (const torch::Tensor& u : {strided, dense}) {
      const torch::Tensor y = vector_polynomials(u, terms, coefficients, 16);
      grads.push_back(torch::autograd::grad({(y * w).sum()}, {u})[0]);
    }
    EXPECT_TRUE(torch::equal(vector_polynomials(strided, terms, coefficients, 16),
                             vector_polynomials(dense, terms, coefficients, 16)));
    EXPECT_TRUE(torch::equal(grads[0], grads[1])) << (grads[0] - grads[1]).abs().max().item<double>();
  }
}

// MACE's radial basis (mlip/ops/bessel_radial.h): the operator's values and derivatives to third
// order against autograd's of the plain formula sqrt(2 / r_max) sin(k r) / r x envelope x step, with
// and without the envelope, harmonic frequencies (the recurrence) and others, edges past the cutoff,
// on each kernel path (the aten one is the closed forms in aten operations).
TEST(BesselRadial, KernelsAndDerivativesMatchTheFormula) {
  const double cutoff = 5.0, pi = 3.141592653589793;
  for (const auto dtype : {torch::kFloat64, torch::kFloat32})
  for (const auto path_choice : {KernelChoice::usual, KernelChoice::device_kernels, KernelChoice::aten})
  for (const int64_t p : {5, 0})
  for (const bool harmonic : {true, false}) {
    SCOPED_TRACE(dtype);
    SCOPED_TRACE(int(path_choice));
    SCOPED_TRACE("p " + std::to_string(p) + (harmonic ? " harmonic" : ""));
    const KernelChoiceScope use(path_choice);
    torch::manual_seed(9);
    const torch::Tensor k = harmonic ? torch::arange(1, 9, torch::kFloat64) * (pi / cutoff)
                                     : torch::rand({8}, torch::kFloat64) * 3.0 + 0.2;
    const std::vector<torch::Tensor> in = {
        (torch::rand({53, 1}, torch::kFloat64) * 5.2 + 0.6).to(dtype).requires_grad_(true)};
    auto op = [&](const std::vector<torch::Tensor>& t) { return bessel_radial(t[0], k.to(dtype), cutoff, p, harmonic); };
    auto formula = [&](const std::vector<torch::Tensor>& t) {
      const torch::Tensor r = t[0], u = r / cutoff, kk = k.to(dtype);
      torch::Tensor y = std::sqrt(2.0 / cutoff) * torch::sin(kk * r) / r;
      if (p == 0) return y;
      const double q = double(p);
      const torch::Tensor env = 1.0 - (q + 1) * (q + 2) / 2 * torch::pow(u, q) + q * (q + 2) * torch::pow(u, q + 1) -
                                q * (q + 1) / 2 * torch::pow(u, q + 2);
      return y * env * (r < cutoff).to(dtype);
    };
    expect_operator_matches_reference(op, formula, in, dtype == torch::kFloat64 ? 1e-12 : 2e-4);
  }
  for (const auto& [call, message] : std::vector<std::pair<std::function<void()>, std::string>>{
           {[] { bessel_radial(torch::ones({4}, torch::kFloat64), torch::ones({3}, torch::kFloat64), 5.0, 5, true); },
            "bessel_radial: r (E, 1) expected"},
           {[] { bessel_radial(torch::ones({4, 1}, torch::kFloat64), torch::ones({3}, torch::kFloat64), 5.0, 5, true, 7); },
            "bessel_radial: derivative order 0 to 6 supported, got 7"}}) {
    try {
      call();
      ADD_FAILURE() << "no error: " << message;
    } catch (const c10::Error& e) {
      EXPECT_NE(std::string(e.what_without_backtrace()).find(message), std::string::npos) << e.what_without_backtrace();
    }
  }
}

// MACE's symmetric contraction on monomials formed in the kernel (mlip/ops/symmetric_contraction.h),
// with monomials of degree 1, 2 and 3 and repeated factors (x_i^2, x_i^3).
TEST(SymmetricContraction, KernelsAndDerivativesMatchTheReference) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32})
  for (const auto path_choice : kKernelPaths) {
    SCOPED_TRACE(dtype);
    SCOPED_TRACE(path_choice == KernelChoice::usual ? "CPU kernels" : "device kernels");
    const KernelChoiceScope use(path_choice);
    torch::manual_seed(7);
    const int64_t n = 17, D = 5, C = 6, S = 3, M = 4;
    const torch::Tensor mono = torch::tensor({0, 5, 5, 3, 5, 5, 1, 1, 5, 2, 4, 5, 0, 0, 0, 1, 2, 3, 4, 4, 2},
                                             torch::kInt64).view({7, 3});
    const auto opt = torch::dtype(dtype);
    const std::vector<torch::Tensor> in = {torch::randn({n, D, C}, opt).requires_grad_(true),
                                           torch::randn({S, 7, M, C}, opt).requires_grad_(true)};
    const torch::Tensor species = torch::randint(0, S, {n}, torch::kInt64);
    auto op = [&](const std::vector<torch::Tensor>& t) { return symmetric_contraction(t[0], t[1], mono, species); };
    auto ref = [&](const std::vector<torch::Tensor>& t) {
      return symmetric_contraction_reference(t[0], t[1], mono, species);
    };
    expect_operator_matches_reference(op, ref, in, dtype == torch::kFloat64 ? 1e-12 : 1e-4);
  }
  const auto f64 = torch::dtype(torch::kFloat64);
  try {
    symmetric_contraction(torch::ones({2, 3, 4}, f64), torch::ones({2, 1, 1, 4}, f64),
                          torch::tensor({{0, 1, 4}}, torch::kInt64), torch::tensor({0, 1}, torch::kInt64));
    FAIL() << "no error";
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    EXPECT_NE(what.find("symmetric_contraction: a monomial index outside [0, 3]"), std::string::npos) << what;
  }
}

// Forces alone (the gradient to x only, as MD asks) skip z's gradient; a force loss then still
// gets the weights' gradient through the second derivatives, on either path.
TEST(SymmetricContraction, ForcesAloneAndTheForceLossWeightGradient) {
  torch::manual_seed(9);
  const int64_t n = 19, D = 5, C = 6, S = 2, M = 4;
  const torch::Tensor mono = torch::tensor({0, 5, 5, 3, 5, 5, 1, 1, 5, 2, 4, 5, 0, 0, 0, 1, 2, 3, 4, 4, 2},
                                           torch::kInt64).view({7, 3});
  const auto opt = torch::dtype(torch::kFloat64);
  const torch::Tensor x0 = torch::randn({n, D, C}, opt), z0 = torch::randn({S, 7, M, C}, opt);
  const torch::Tensor species = torch::randint(0, S, {n}, torch::kInt64);
  auto run = [&](bool reference) {
    const torch::Tensor x = x0.clone().requires_grad_(true), z = z0.clone().requires_grad_(true);
    const torch::Tensor b = reference ? symmetric_contraction_reference(x, z, mono, species)
                                      : symmetric_contraction(x, z, mono, species);
    const torch::Tensor gx = torch::autograd::grad({(b * b).sum()}, {x}, {}, true, true)[0];
    const torch::Tensor gz = torch::autograd::grad({(gx * gx).sum()}, {z})[0];
    return std::make_pair(gx.detach(), gz);
  };
  const auto ref = run(true);
  for (const auto path_choice : kKernelPaths) {
    const KernelChoiceScope use(path_choice);
    const auto got = run(false);
    EXPECT_TRUE(torch::allclose(got.first, ref.first, 1e-12, 1e-12));
    EXPECT_TRUE(torch::allclose(got.second, ref.second, 1e-11, 1e-11));
  }
}

// MACE's and PaiNN's energies and forces on the device kernels' per-element code (run on the CPU)
// equal those on the CPU kernels, and on the aten formulations.
TEST(DeviceKernels, ModelsOnThemEqualTheCpuKernels) {
  for (const char* architecture : {"mace", "painn"})
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    SCOPED_TRACE(architecture);
    SCOPED_TRACE(dtype);
    const Model model = make_model(Case{architecture, dtype});
    const Structure s = sample(4);
    const auto cpu = evaluate_reference(model, s);
    const double tol = dtype == torch::kFloat64 ? 1e-11 : 2e-5;
    for (const auto path_choice : {KernelChoice::device_kernels, KernelChoice::aten}) {
      const KernelChoiceScope use(path_choice);
      const auto other = evaluate_reference(model, s);
      EXPECT_NEAR(other.energy, cpu.energy, tol * std::abs(cpu.energy));
      const double fscale = max_abs(cpu.forces);
      for (std::size_t i = 0; i < s.size(); ++i)
        for (int d = 0; d < 3; ++d) EXPECT_NEAR(other.forces[i][d], cpu.forces[i][d], 10 * tol * fscale);
    }
  }
}

// MACE's operators on threads: values, gradients (the kernels, no graph) and second derivatives
// on 1, 2 and 3 threads are bitwise the same, with edges in no particular order, a channel count
// that is no multiple of the channel blocks, and float32 and float64.
TEST(MaceOperators, ThreadsGiveBitwiseTheResultOfOneThread) {
  const int threads = at::get_num_threads();
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    SCOPED_TRACE(dtype);
    torch::manual_seed(8);
    const auto opt = torch::dtype(dtype);
    const int64_t nodes = 211, n_out = 150, A = 4, C = 20, K = 9, P = 4, edges = 3000, S = 3;
    const torch::Tensor path = torch::tensor({0, 1, 1, 1, 2, 3, 3, 3, 3}, torch::kInt64);
    const torch::Tensor center = torch::randint(0, n_out, {edges}, torch::kInt64);
    const torch::Tensor neighbor = torch::randint(0, nodes, {edges}, torch::kInt64);
    const torch::Tensor mono = torch::tensor({0, 5, 5, 3, 5, 5, 1, 1, 5, 2, 4, 5, 0, 0, 0, 1, 2, 3, 4, 4, 2},
                                             torch::kInt64).view({7, 3});
    const torch::Tensor species = torch::randint(0, S, {nodes}, torch::kInt64);
    const std::vector<torch::Tensor> inputs = {torch::randn({nodes, A, C}, opt), torch::randn({edges, A, K}, opt),
                                               torch::randn({edges, P, C}, opt), torch::randn({nodes, 5, C}, opt),
                                               torch::randn({S, 7, 4, C}, opt)};
    std::vector<std::vector<torch::Tensor>> runs;
    for (const int t : {1, 2, 3}) {
      at::set_num_threads(t);
      std::vector<torch::Tensor> in, out;
      for (const auto& x : inputs) in.push_back(x.clone().requires_grad_(true));
      const torch::Tensor msg = equivariant_message(in[0], in[1], in[2], path, center, neighbor, n_out);
      const torch::Tensor b = symmetric_contraction(in[3], in[4], mono, species);
      const torch::Tensor loss = (msg * msg).sum() + (b * b * b).sum();
      const auto g = torch::autograd::grad({loss}, in, {}, true, true);
      torch::Tensor q = torch::zeros({}, opt);
      for (const auto& gk : g) q = q + (gk * gk).sum();
      const auto h = torch::autograd::grad({q}, in);  // second derivatives, on the kernels
      out = {msg.detach(), b.detach()};
      for (const auto& gk : g) out.push_back(gk.detach());
      for (const auto& hk : h) out.push_back(hk);
      runs.push_back(out);
    }
    for (std::size_t r = 1; r < runs.size(); ++r)
      for (std::size_t k = 0; k < runs[0].size(); ++k)
        EXPECT_TRUE(torch::equal(runs[r][k], runs[0][k])) << "threads run " << r << ", output " << k;
  }
  at::set_num_threads(threads);
}

TEST(VectorMessage, BadIndicesAndShapesAreErrors) {
  const auto opt = torch::dtype(torch::kFloat64);
  const torch::Tensor phi = torch::ones({4, 6}, opt), w = torch::ones({3, 6}, opt), v = torch::ones({4, 3, 2}, opt);
  const torch::Tensor unit = torch::ones({3, 3}, opt), index = torch::tensor({0, 1, 3}, torch::kInt64);
  auto message = [](auto f) -> std::string {
    try {
      f();
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    }
    return "no error";
  };
  EXPECT_NE(message([&] { vector_message(phi, w, v, unit, index, index, 3); })
                .find("vector_message: a center index outside [0, 3)"),
            std::string::npos);
  EXPECT_NE(message([&] { vector_message(phi, w, v, unit, index.clamp_max(1), index + 1, 2); })
                .find("vector_message: a neighbor index outside [0, 4)"),
            std::string::npos);
  EXPECT_NE(message([&] { vector_message(phi, torch::ones({3, 5}, opt), v, unit, index, index, 4); })
                .find("vector_message: w (E, 3F) expected"),
            std::string::npos);
  EXPECT_NE(message([&] { vector_message(phi, w.to(torch::kFloat32), v, unit, index, index, 4); })
                .find("must have one dtype"),
            std::string::npos);
}

// tanh_net (mlip/ops/radial_net.h) against the plain net differentiated by autograd: values,
// dy/dx, and the parameter gradients of a force-style loss (a function of dL/dx, differentiated
// once more), in both dtypes, over several row blocks.
TEST(TanhNet, MatchesAutogradOfThePlainNet) {
  const int threads = at::get_num_threads();
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    // The CPU's blocks, the device kernels (the forward keeping the stacked values, the layers'
    // elementwise backward kernel), the ATen formulation in one block (a GPU's without the kernels).
    for (const auto choice : {KernelChoice::usual, KernelChoice::device_kernels, KernelChoice::aten}) {
      const KernelChoiceScope use(choice);
      SCOPED_TRACE("kernel choice " + std::to_string(static_cast<int>(choice)));
      torch::manual_seed(3);
      const auto opt = torch::dtype(dtype);
      const std::vector<int64_t> widths = {1, 4, 8, 8, 5}, residual = {0, 2, 1, 0};
      std::vector<torch::Tensor> params;
      for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
        params.push_back((torch::randn({widths[l], widths[l + 1]}, opt) * 0.7).requires_grad_(true));
        params.push_back(torch::randn({widths[l + 1]}, opt).requires_grad_(true));
      }
      const int64_t rows = 1300;   // three blocks of 512
      const torch::Tensor x = (torch::rand({rows}, opt) * 2).requires_grad_(true);
      const torch::Tensor weight = torch::randn({rows, widths.back()}, opt);
      auto plain = [&](const torch::Tensor& in) {
        torch::Tensor y = in.unsqueeze(1);
        for (std::size_t l = 0; l < residual.size(); ++l) {
          const torch::Tensor a = torch::tanh(torch::addmm(params[2 * l + 1], y, params[2 * l]));
          y = residual[l] == 0 ? a : residual[l] == 1 ? y + a : torch::cat({y, y}, 1) + a;
        }
        return y;
      };
      const double tol = dtype == torch::kFloat64 ? 1e-11 : 1e-4;
      const auto [y, y_dx] = tanh_net(x, params, residual);
      const torch::Tensor y_ref = plain(x);
      ASSERT_TRUE(torch::allclose(y, y_ref, tol, tol)) << dtype;
      for (int64_t m = 0; m < widths.back(); ++m) {   // rows are independent: column m's dy/dx at once
        const torch::Tensor d = torch::autograd::grad({y_ref.select(1, m).sum()}, {x}, {}, true)[0];
        ASSERT_TRUE(torch::allclose(y_dx.select(1, m), d, tol, tol)) << dtype << " column " << m;
      }
      // L = sum(w y) + sum((dL0/dx)^2), L0 = sum(w y): the parameters' gradients, as a force loss needs.
      auto loss = [&](const torch::Tensor& out) {
        const torch::Tensor e = (out * weight).sum();
        const torch::Tensor gx = torch::autograd::grad({e}, {x}, {}, true, true)[0];
        return e + (gx * gx).sum();
      };
      const auto ga = torch::autograd::grad({loss(y)}, params);
      const auto gb = torch::autograd::grad({loss(plain(x))}, params);
      for (std::size_t k = 0; k < params.size(); ++k)
        EXPECT_TRUE(torch::allclose(ga[k], gb[k], 10 * tol, 10 * tol)) << dtype << " parameter " << k;
      // What it does not do: d/dx of dy/dx.
      try {
        torch::autograd::grad({loss(std::get<0>(tanh_net(x, params, residual)))}, {x});
        ADD_FAILURE() << "no error for a second derivative with respect to x";
      } catch (const c10::Error& e) {
        EXPECT_NE(std::string(e.what()).find("needs the net's second derivative"), std::string::npos) << e.what();
      }
    }
  }
  at::set_num_threads(threads);
}

// tanh_net's device kernel (radial_net_elements.h, here on the CPU's loop) against the CPU path:
// values and dy/dx of MD's forward (no parameter requires grad), and the gradient with respect to
// x through it (forces), for a small net with every residual kind, DeePMD's 25-50-100 net, and a
// net too wide for the kernel (the ATen formulation then, on either path).
TEST(TanhNet, DeviceKernelEqualsTheCpuPath) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32})
  for (const auto& net : std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>>{
           {{1, 4, 8, 8, 5}, {0, 2, 1, 0}}, {{1, 25, 50, 100}, {0, 2, 2}}, {{1, 300}, {0}}}) {
    const std::vector<int64_t>& widths = net.first;
    const std::vector<int64_t>& residual = net.second;
    torch::manual_seed(4);
    const auto opt = torch::dtype(dtype);
    std::vector<torch::Tensor> params;
    for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
      params.push_back(torch::randn({widths[l], widths[l + 1]}, opt) * 0.4);
      params.push_back(torch::randn({widths[l + 1]}, opt));
    }
    const torch::Tensor x = torch::rand({700}, opt) * 3;
    const torch::Tensor weight = torch::randn({700, widths.back()}, opt);
    auto run = [&](KernelChoice choice) {
      const KernelChoiceScope use(choice);
      const torch::Tensor xg = x.clone().requires_grad_(true);
      const auto [y, y_dx] = tanh_net(xg, params, residual);
      const torch::Tensor gx = torch::autograd::grad({(y * weight).sum()}, {xg})[0];
      return std::vector<torch::Tensor>{y.detach(), y_dx, gx};
    };
    const auto cpu = run(KernelChoice::usual), device = run(KernelChoice::device_kernels);
    const double tol = dtype == torch::kFloat64 ? 1e-13 : 2e-5;
    for (std::size_t k = 0; k < cpu.size(); ++k) {
      const double scale = cpu[k].abs().max().item<double>();
      EXPECT_LE((device[k] - cpu[k]).abs().max().item<double>(), tol * scale)
          << dtype << ", widths up to " << widths.back() << ", output " << k;
    }
  }
}

TEST(TabulatedContraction, InputBeyondTheTableIsAnErrorNamingTheDistance) {
  const torch::Tensor table = torch::zeros({1, 10, 6, 2}, torch::kFloat64);
  const torch::Tensor x = torch::tensor({0.2, 1.5}, torch::kFloat64), env = torch::ones({2, 4}, torch::kFloat64);
  const torch::Tensor idx = torch::zeros({2}, torch::kInt64);
  try {
    tabulated_contraction(x, env, idx, idx, table, 0.1, 0.65, 1);
    ADD_FAILURE() << "no error";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("a neighbour is closer than its embedding table covers (made for distances >= 0.65 A"),
              std::string::npos) << e.what();
  }
  auto error_of = [&](const torch::Tensor& xs, const torch::Tensor& centers, int64_t n_centers) -> std::string {
    try {
      tabulated_contraction(xs, env, centers, idx, table, 0.1, 0.65, n_centers);
    } catch (const c10::Error& e) {
      return e.what();
    }
    return "no error";
  };
  const torch::Tensor inside = torch::tensor({0.2, 0.3}, torch::kFloat64);
  EXPECT_NE(error_of(torch::tensor({0.2, std::nan("")}, torch::kFloat64), idx, 1).find("a non-finite embedding input"),
            std::string::npos);
  EXPECT_NE(error_of(torch::tensor({0.2, -0.5}, torch::kFloat64), idx, 1).find("an embedding input below its table"),
            std::string::npos);
  EXPECT_NE(error_of(inside, torch::tensor({int64_t{0}, int64_t{3}}), 2).find("a centre index outside"),
            std::string::npos);
  // No second derivatives: a force loss on a compressed model is an error, not a zero gradient.
  const torch::Tensor xg = inside.clone().requires_grad_(true);
  const torch::Tensor t = tabulated_contraction(xg, env, idx, idx, torch::randn({1, 10, 6, 2}, torch::kFloat64), 0.1,
                                                0.65, 1);
  EXPECT_THROW(torch::autograd::grad({t.sum()}, {xg}, {}, true, /*create_graph=*/true), c10::Error);
}

// The operators' backwards are operators of their own (torch.ops.mlip.*_backward, callable from
// TorchScript): called directly with a gradient of the wrong shape, or operands outside the
// table, each is an error that names it on every kernel path, never a read outside its memory.
TEST(Operators, BackwardsCalledDirectlyCheckTheirOperands) {
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto i64 = torch::dtype(torch::kInt64);
  auto error_of = [](const char* name, const std::vector<c10::IValue>& args) -> std::string {
    const auto op = c10::Dispatcher::singleton().findSchemaOrThrow(name, "");
    torch::jit::Stack stack(args.begin(), args.end());
    try {
      op.callBoxed(&stack);
    } catch (const c10::Error& e) {
      return e.what_without_backtrace();
    }
    return "no error";
  };
  for (const auto path_choice : {KernelChoice::usual, KernelChoice::device_kernels, KernelChoice::aten}) {
    SCOPED_TRACE(static_cast<int>(path_choice));
    const KernelChoiceScope use(path_choice);
    // equivariant_message: x (3, 2, 4), s (2, 2, 3), w (2, 2, 4), 2 outputs: g (2, 3, 4)
    const std::vector<c10::IValue> message = {torch::ones({3, 2, 4}, f64), torch::ones({2, 2, 3}, f64),
                                              torch::ones({2, 2, 4}, f64), torch::tensor({0, 1, 1}, i64),
                                              torch::tensor({0, 1}, i64), torch::tensor({0, 2}, i64)};
    auto with_g = [](const torch::Tensor& g, std::vector<c10::IValue> rest, c10::IValue last) {
      rest.insert(rest.begin(), g);
      rest.push_back(last);
      return rest;
    };
    EXPECT_EQ(error_of("mlip::equivariant_message_backward", with_g(torch::ones({2, 3, 4}, f64), message, 7)),
              "no error");
    EXPECT_NE(error_of("mlip::equivariant_message_backward", with_g(torch::ones({2, 3, 5}, f64), message, 7))
                  .find("equivariant_message_backward: g (n_out, K, C)"), std::string::npos);
    EXPECT_NE(error_of("mlip::equivariant_message_backward", with_g(torch::ones({1, 3, 4}, f64), message, 7))
                  .find("equivariant_message: a center index outside [0, 1)"), std::string::npos);
    // symmetric_contraction: x (2, 3, 4), z (2, 1, 5, 4), one monomial: g (2, 5, 4)
    const std::vector<c10::IValue> contraction = {torch::ones({2, 3, 4}, f64), torch::ones({2, 1, 5, 4}, f64),
                                                  torch::tensor({{0, 1, 3}}, i64), torch::tensor({0, 1}, i64)};
    EXPECT_EQ(error_of("mlip::symmetric_contraction_backward", with_g(torch::ones({2, 5, 4}, f64), contraction, true)),
              "no error");
    EXPECT_NE(error_of("mlip::symmetric_contraction_backward", with_g(torch::ones({2, 4, 4}, f64), contraction, true))
                  .find("symmetric_contraction_backward: g (n, M, C)"), std::string::npos);
    // tabulated_contraction: 2 edges into 1 centre, a table of 1 net, 10 bins of step 0.1, M = 2
    const torch::Tensor table = torch::zeros({1, 10, 6, 2}, f64), env = torch::ones({2, 4}, f64);
    const torch::Tensor idx = torch::zeros({2}, i64);
    auto tabulated = [&](const torch::Tensor& grad, const torch::Tensor& x, const torch::Tensor& center) {
      return error_of("mlip::tabulated_contraction_backward", {grad, x, env, center, idx, table, 0.1});
    };
    const torch::Tensor x = torch::tensor({0.2, 0.3}, f64), grad = torch::ones({1, 4, 2}, f64);
    EXPECT_EQ(tabulated(grad, x, idx), "no error");
    EXPECT_NE(tabulated(torch::ones({1, 4, 3}, f64), x, idx).find("tabulated_contraction_backward: grad (n_centers, 4, M)"),
              std::string::npos);
    EXPECT_NE(tabulated(grad, torch::tensor({0.2, -0.5}, f64), idx).find("an embedding input below its table"),
              std::string::npos);
    EXPECT_NE(tabulated(grad, x, torch::tensor({0, 1}, i64)).find("a centre index outside"), std::string::npos);
  }
}

// Inside autograd, an operator's backward runs on the operands its forward checked: it reads no
// index back again (on a GPU each read is a wait for the device). Called directly (above), it
// checks them.
TEST(Operators, BackwardsInsideAutogradReadNoIndicesAgain) {
  const auto f64 = torch::dtype(torch::kFloat64);
  const auto i64 = torch::dtype(torch::kInt64);
  const torch::Tensor x = torch::randn({3, 2, 4}, f64).requires_grad_(true);
  const torch::Tensor s = torch::randn({2, 2, 3}, f64).requires_grad_(true);
  const torch::Tensor w = torch::randn({2, 2, 4}, f64).requires_grad_(true);
  const torch::Tensor path = torch::tensor({0, 1, 1}, i64), center = torch::tensor({0, 1}, i64);
  const torch::Tensor neighbor = torch::tensor({0, 2}, i64);
  const torch::Tensor z = torch::randn({2, 1, 5, 4}, f64).requires_grad_(true);
  const torch::Tensor mono = torch::tensor({{0, 1, 3}}, i64), species = torch::tensor({0, 1}, i64);
  // vector_polynomials' table (output, powers of x, y, z): its highest power and the derivative
  // table's pruning are the reads there.
  const torch::Tensor u = torch::randn({4, 3}, f64).requires_grad_(true);
  const torch::Tensor terms = torch::tensor({0, 1, 0, 0, 1, 0, 2, 1, 2, 1, 1, 1, 2, 0, 0, 3}, i64).view({4, 4});
  const torch::Tensor coefficients = torch::randn({4}, f64);
  auto index_reads = [](const std::function<void()>& work) {
    KernelProfile profile(torch::kCPU);
    work();
    int64_t n = 0;
    for (const ProfileRow& r : profile.stop().rows)
      n += r.name == "aten::aminmax" || r.name == "aten::nonzero" || r.name == "aten::item" ? r.calls : 0;
    return n;
  };
  auto forward = [&] {
    const torch::Tensor m = equivariant_message(x, s, w, path, center, neighbor, 2);   // (2, 3, 4)
    return symmetric_contraction(m.narrow(1, 0, 3).contiguous(), z, mono, species).pow(2).sum() +
           vector_polynomials(u, terms, coefficients, 3).pow(2).sum();
  };
  const int64_t by_forward = index_reads([&] { forward(); });
  EXPECT_GT(by_forward, 0);
  const int64_t with_gradients = index_reads([&] {
    const torch::Tensor y = forward();
    // first and second derivatives (a force loss's parameter gradients)
    const auto g = torch::autograd::grad({y}, {x, s, u}, {}, true, /*create_graph=*/true);
    torch::autograd::grad({g[0].sum() + g[1].sum() + g[2].pow(2).sum()}, {w, z, u});
  });
  EXPECT_EQ(with_gradients, by_forward);
}

// A compressed se_e2_a against the model it came from, compressed from the trainable module and
// from its exported file: forces within 1e-6 eV/A and energies within 1e-7 eV/atom (float64) on
// random structures and distorted water frames; Python's torch.jit.load runs it with the
// operator's library.
class Compression : public ::testing::TestWithParam<Case> {};

std::vector<Structure> compression_frames() {
  std::vector<Structure> frames = {sample(1), sample(2), sample(3)};
  std::vector<Structure> water = read_deepmd(mlip::testing::source_dir() + "/data/water-deepmd/data_0");
  std::mt19937 rng(9);
  std::normal_distribution<double> noise(0.0, 0.04);
  for (int k : {0, 40, 79}) {
    Structure s = water.at(k);
    for (auto& x : s.positions)
      for (double& v : x) v += noise(rng);
    frames.push_back(s);
  }
  return frames;
}

TEST_P(Compression, MatchesTheUncompressedModel) {
  const bool f32 = GetParam().dtype == torch::kFloat32;
  const double force_tol = f32 ? 2e-3 : 1e-6, energy_tol = f32 ? 1e-4 : 1e-7;
  BuiltModel built = build(GetParam());
  testing::TempDir dir("mlip_test_compression_" + case_name({GetParam(), 0}));
  const std::string path = (dir.path / "model.pt").string(), compressed_path = (dir.path / "compressed.pt").string();
  export_frozen(built.module, built.metadata, path);
  const Model frozen = Model::load(path);
  CompressOptions options;
  options.min_distance = 0.7;
  CompressReport report;
  ModelMetadata meta = frozen.metadata();
  export_frozen(compress_model(const_cast<Model&>(frozen).module(), meta, options, &report), meta, compressed_path);
  const Model compressed = Model::load(compressed_path);
  ModelMetadata meta2 = built.metadata;
  const Model from_trainable(compress_model(built.module, meta2, options), meta2, torch::kCPU);
  EXPECT_EQ(compressed.metadata().hyperparameters["compression"]["bins"].get<int64_t>(), report.bins);
  double df = 0, de = 0;
  for (const Structure& s : compression_frames()) {
    const auto ref = evaluate_reference(frozen, s);
    for (const Model* m : {&compressed, &from_trainable}) {
      const auto c = evaluate_reference(*m, s);
      for (std::size_t i = 0; i < s.size(); ++i) {
        de = std::max(de, std::abs(c.atom_energy[i] - ref.atom_energy[i]));
        for (int d = 0; d < 3; ++d) df = std::max(df, std::abs(c.forces[i][d] - ref.forces[i][d]));
      }
    }
  }
  std::printf("[ compression ] %s: %lld bins x %lld nets, table error %.2e; max |dF| %.2e eV/A, max |dE| %.2e eV/atom\n",
              case_name({GetParam(), 0}).c_str(), static_cast<long long>(report.bins),
              static_cast<long long>(report.nets), report.max_error, df, de);
  EXPECT_LE(df, force_tol);
  EXPECT_LE(de, energy_tol);

  // Too close for the table: an error, not an extrapolation.
  Structure close = sample(4);
  close.positions[1] = close.positions[0];
  close.positions[1][0] += 0.5;
  try {
    evaluate_reference(compressed, close);
    ADD_FAILURE() << "no error for a neighbour closer than the table";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("RuntimeError: compressed model: a neighbour is closer than its embedding "
                                         "table covers (made for distances >= 0.7 A"),
              std::string::npos) << e.what();
  }

#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "Python cannot load the AddressSanitizer build's libmlip_ops.so";
#endif
  const std::string python = MLIP_TORCH_PYTHON;
  if (python.empty() || std::system((python + " -c 'import torch' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "no Python with the build's torch package";
  }
  const Structure s = sample(6);
  const NeighborList nl = build_neighbor_list(s, kCutoff);
  std::vector<int64_t> species;
  for (int z : s.numbers) species.push_back(z == 8 ? 1 : 0);
  nlohmann::json in = {{"species", species}, {"edge_index", {nl.centers, nl.neighbors}},
                       {"edge_vectors", nl.vectors}, {"n_centers", s.size()}};
  std::ofstream(dir.path / "in.json") << in.dump();
  const std::string cmd = python + " -W ignore " + mlip::testing::source_dir() + "/tests/python/torch_load.py " +
                          compressed_path + " " + (dir.path / "in.json").string() + " " +
                          (dir.path / "out.json").string() + " " + MLIP_OPS_LIBRARY;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const auto out = nlohmann::json::parse(std::ifstream(dir.path / "out.json"));
  const auto c = evaluate_reference(compressed, s);
  for (std::size_t i = 0; i < s.size(); ++i)
    EXPECT_NEAR(out["energies"][i].get<double>(), c.atom_energy[i], f32 ? 1e-5 : 1e-12);
}

INSTANTIATE_TEST_SUITE_P(SeE2A, Compression,
                         ::testing::Values(Case{"se_e2_a", torch::kFloat64}, Case{"se_e2_a_two_side", torch::kFloat64},
                                           Case{"se_e2_a_sel", torch::kFloat64}, Case{"se_e2_a_sel_two_side", torch::kFloat32},
                                           Case{"se_e2_a", torch::kFloat64, true}, Case{"se_e2_a", torch::kFloat32}),
                         case_name);

// A first embedding layer of 1 or 2 units (1 -> 2 -> 4 here): compressed from the trainable module
// (a checkpoint), the model its uncompressed self; a model whose embedding() is not its nets (as
// mlip's before 2026-12-06 were there: tanh(x W / 2 + b)) is refused, not tabulated, and so is a
// frozen model of such a layer, whose weights cannot be checked.
TEST(CompressionRefusal, AnEmbeddingMethodThatIsNotTheNets) {
  BuiltModel built = build(Case{"se_e2_a_sel_residual", torch::kFloat64});
  CompressOptions options;
  options.min_distance = 0.7;
  {
    ModelMetadata meta = built.metadata;
    const Model uncompressed(built.module, built.metadata, torch::kCPU);
    const Model compressed(compress_model(built.module, meta, options), meta, torch::kCPU);
    const Structure s = sample(3);
    const auto want = evaluate_reference(uncompressed, s), got = evaluate_reference(compressed, s);
    for (std::size_t i = 0; i < s.size(); ++i) {
      EXPECT_NEAR(got.atom_energy[i], want.atom_energy[i], 1e-7) << i;
      for (int d = 0; d < 3; ++d) EXPECT_NEAR(got.forces[i][d], want.forces[i][d], 1e-6) << i;
    }
    testing::TempDir dir("mlip_test_compression_residual");
    const std::string path = (dir.path / "model.pt").string();
    export_frozen(built.module, built.metadata, path);
    const Model frozen = Model::load(path);
    ModelMetadata frozen_meta = frozen.metadata();
    try {
      compress_model(const_cast<Model&>(frozen).module(), frozen_meta, options);
      ADD_FAILURE() << "a frozen model of a residual first embedding layer compressed";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("compress from its checkpoint"), std::string::npos) << e.what();
    }
  }
  torch::jit::Module old("__torch__.OldSeE2A");
  for (const char* name : {"emb_w0", "emb_b0", "emb_w1", "emb_b1"})
    old.register_parameter(name, built.module.attr(name).toTensor().detach(), false);
  old.define(R"(
def environment(self, x: Tensor) -> Tensor:
    return x
def energies(self, x: Tensor) -> Tensor:
    return x
def embedding(self, x: Tensor, t: int) -> Tensor:
    x = torch.cat([x, x], 1) + torch.tanh(torch.addmm(self.emb_b0[t], x, self.emb_w0[t] * 0.5))
    return torch.cat([x, x], 1) + torch.tanh(torch.addmm(self.emb_b1[t], x, self.emb_w1[t]))
)");
  ModelMetadata meta = built.metadata;
  try {
    compress_model(old, meta, options);
    ADD_FAILURE() << "compressed";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("compress: the model's embedding() method differs from its embedding net 0"),
              std::string::npos) << e.what();
  }
  EXPECT_FALSE(meta.hyperparameters.contains("compression"));
}

// Grouped graphs (mlip/model/grouped_graph.h): the static-shape evaluation that CUDA graphs record,
// checked on the CPU through the same code (GraphCapture without recording). Energies and edge
// gradients equal the plain forward()'s, on whole structures and on graphs whose last nodes
// are not centres (LAMMPS's ghosts), for one- and two-sided nets, the repulsion prior and a
// compressed model; the capacities grow only when a group outgrows them.
class Grouped : public ::testing::TestWithParam<Case> {};

// The graph of `s` with only its first `n_centers` atoms as centres (edges from them only).
struct PartialGraph {
  testing::StructureGraph full;
  std::vector<int64_t> index;
  std::vector<double> vectors;
  GraphView view;
  PartialGraph(const Model& m, const Structure& s, int64_t n_centers) : full(m, s) {
    std::vector<int64_t> keep;
    for (int64_t e = 0; e < full.ne; ++e)
      if (full.index[e] < n_centers) keep.push_back(e);
    const auto ne = static_cast<int64_t>(keep.size());
    index.resize(2 * ne);
    for (int64_t k = 0; k < ne; ++k) {
      index[k] = full.index[keep[k]];
      index[ne + k] = full.index[full.ne + keep[k]];
      for (int d = 0; d < 3; ++d) vectors.push_back(full.nl.vectors[keep[k]][d]);
    }
    view = full.view();
    view.edge_index = index.data();
    view.edge_index_stride = view.n_edges = ne;
    view.edge_vectors = vectors.data();
    view.n_centers = n_centers;
  }
};

TEST_P(Grouped, EqualsThePlainForward) {
  const bool f32 = GetParam().dtype == torch::kFloat32;
  BuiltModel built = build(GetParam());
  testing::TempDir dir("mlip_test_grouped_" + case_name({GetParam(), 0}));
  const std::string path = (dir.path / "model.pt").string();
  export_frozen(built.module, built.metadata, path);
  std::vector<Model> models = {Model(built.module, built.metadata, torch::kCPU), Model::load(path)};
  if (!f32) {   // and its compressed form
    ModelMetadata meta = models[1].metadata();
    CompressOptions options;
    options.min_distance = 0.7;
    export_frozen(compress_model(models[1].module(), meta, options), meta, (dir.path / "c.pt").string());
    models.push_back(Model::load((dir.path / "c.pt").string()));
  }
  for (const Model& m : models) {
    ASSERT_TRUE(m.info().grouped_forward);
    GraphCapture eager(m, /*record=*/false);
    const std::vector<Structure> frames = compression_frames();   // 3 random, then 3 water frames
    GroupCapacity first_water;
    for (std::size_t k = 0; k < frames.size(); ++k) {
      const Structure& s = frames[k];
      for (const int64_t n_centers : {static_cast<int64_t>(s.size()), static_cast<int64_t>(s.size()) / 2}) {
        const PartialGraph g(m, s, n_centers);
        const ModelOutput a = evaluate_graph(m, g.view), b = eager.evaluate(g.view);
        ASSERT_EQ(b.atom_energy.size(0), n_centers);
        ASSERT_EQ(b.edge_grad.sizes(), a.edge_grad.sizes());
        EXPECT_LE(max_rel_difference(a.atom_energy, b.atom_energy), f32 ? 1e-5 : 1e-12) << m.info().architecture;
        EXPECT_LE(max_rel_difference(a.edge_grad, b.edge_grad), f32 ? 1e-4 : 1e-11) << m.info().architecture;
        // on the ATen formulations, as a GPU records the call (reading nothing back: MLIP_CHECK_RECORDABLE)
        const KernelChoiceScope aten(KernelChoice::aten);
        const ModelOutput r = eager.evaluate(g.view);
        EXPECT_LE(max_rel_difference(a.atom_energy, r.atom_energy), f32 ? 1e-5 : 1e-12) << m.info().architecture;
        EXPECT_LE(max_rel_difference(a.edge_grad, r.edge_grad), f32 ? 1e-4 : 1e-11) << m.info().architecture;
      }
      // Other configurations of the same 192 water atoms fit in the first one's capacities.
      if (k == 3) first_water = eager.capacity();
      if (k > 3) {
        EXPECT_TRUE(eager.capacity() == first_water) << "capacities grew for water frame " << k;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(SeE2A, Grouped,
                         ::testing::Values(Case{"se_e2_a", torch::kFloat64}, Case{"se_e2_a_two_side", torch::kFloat64},
                                           Case{"se_e2_a_sel_two_side", torch::kFloat64},
                                           Case{"se_e2_a", torch::kFloat64, true}, Case{"se_e2_a", torch::kFloat32}),
                         case_name);

TEST(GroupedGraph, PaddingLayoutAndCapacityPolicy) {
  EXPECT_EQ(grouped_capacity(0), 0);
  EXPECT_EQ(grouped_capacity(1), 32);
  EXPECT_EQ(grouped_capacity(29), 32);    // 31.9 -> 32
  EXPECT_EQ(grouped_capacity(30), 64);    // 33 -> 64
  EXPECT_EQ(grouped_capacity(1000), 1120);
  const Model m = make_model({"se_e2_a", torch::kFloat64});
  const Structure s = sample(3);
  const PartialGraph g(m, s, 10);
  const GroupingRule rule = GroupingRule::of(m);
  GroupCapacity cap;
  GroupedGraph out;
  EXPECT_TRUE(group_graph(g.view, rule, cap, out));
  EXPECT_FALSE(group_graph(g.view, rule, cap, out));
  ASSERT_EQ(cap.centers.size(), 2u);
  ASSERT_EQ(cap.edges.size(), 2u);                 // one net per neighbour species
  EXPECT_EQ(out.n_centers(), cap.centers[0] + cap.centers[1]);
  EXPECT_EQ(static_cast<int64_t>(out.species.size()), out.n_centers() + cap.others);
  // Every node and edge lands once, in its group, with its data; the rest is padding.
  std::vector<int> used(out.n_edges(), 0);
  const int64_t ne = g.view.n_edges, n_out = out.n_edges();
  for (int64_t e = 0; e < ne; ++e) {
    const int64_t at = out.edge_position[e];
    ++used[at];
    EXPECT_EQ(out.edge_index[at], out.node_position[g.index[e]]);
    EXPECT_EQ(out.edge_index[n_out + at], out.node_position[g.index[ne + e]]);
    for (int d = 0; d < 3; ++d) EXPECT_EQ(out.edge_vectors[3 * at + d], g.vectors[3 * e + d]);
    // Grouped by the neighbour's species: net 0's edges first.
    EXPECT_EQ(at < cap.edges[0], g.view.species[g.index[ne + e]] == 0);
  }
  int64_t padding = 0;
  const int64_t n_out_centers = out.n_centers();
  std::vector<int64_t> padding_on(static_cast<std::size_t>(n_out_centers), 0);
  for (int64_t e = 0; e < out.n_edges(); ++e) {
    if (used[e] == 0) {
      ++padding;
      EXPECT_EQ(out.edge_vectors[3 * e], 2.0 * kCutoff);   // beyond the cutoff
      // a centre to itself, spread over the centres (not all on one: a GPU's sums onto it would
      // take them one after another)
      EXPECT_EQ(out.edge_index[e], out.edge_index[n_out + e]);
      ASSERT_LT(out.edge_index[e], n_out_centers);
      ++padding_on[static_cast<std::size_t>(out.edge_index[e])];
    }
    EXPECT_LE(used[e], 1);
  }
  EXPECT_EQ(padding, out.n_edges() - g.view.n_edges);
  EXPECT_LE(*std::max_element(padding_on.begin(), padding_on.end()), padding / n_out_centers + static_cast<int64_t>(cap.edges.size()));   // a run of slots per net
  for (int64_t i = 0; i < g.view.n_centers; ++i) {
    const int64_t at = out.node_position[i], t = g.view.species[i];
    EXPECT_EQ(out.species[at], t);
    const int64_t first = t == 0 ? 0 : cap.centers[0];
    EXPECT_TRUE(at >= first && at < first + cap.centers[t]) << "centre " << i << " outside its species' group";
  }
}

// The message-passing models' forward_grouped() (edges into centres, then the halo's own edges;
// padding edges on padding centres) equals their plain forward on graphs with a halo (the centres
// are the first half of the atoms, every other atom sends along its edges) and without, with and
// without the ZBL prior (MACE: also its own ZBL and Agnesi transform, and a multi-head model's
// default head and a chosen one), also through an exported file, and with the operators' paths a
// CUDA graph records (their ATen formulations, no device value read); padding edges join padding
// centres to themselves, the padding centres in turn.
TEST(GroupedGraph, MessagePassingEqualsThePlainForward) {
  for (const Case& c : {Case{"painn", torch::kFloat64}, Case{"painn", torch::kFloat64, true}, Case{"mace", torch::kFloat64},
                        Case{"mace", torch::kFloat64, true}, Case{"mace_nonlinear", torch::kFloat64},
                        Case{"mace_heads", torch::kFloat64}}) {
    SCOPED_TRACE(::testing::PrintToString(c));
    BuiltModel built = build(c);
    testing::TempDir dir("mlip_test_grouped_painn");
    const std::string path = (dir.path / "model.pt").string();
    export_frozen(built.module, built.metadata, path);
    std::vector<Model> models = {Model(built.module, built.metadata, torch::kCPU), Model::load(path)};
    for (const Model& m : models) {
      ASSERT_TRUE(m.info().grouped_forward);
      const GroupingRule rule = GroupingRule::of(m);
      EXPECT_TRUE(rule.message_passing);
      GraphCapture eager(m, /*record=*/false);
      for (const Structure& s : compression_frames()) {
        const testing::StructureGraph full(m, s);
        for (const int64_t n_centers : {static_cast<int64_t>(s.size()), static_cast<int64_t>(s.size()) / 2}) {
          SCOPED_TRACE(std::to_string(n_centers) + " centres of " + std::to_string(s.size()));
          GraphView v = full.view();
          v.n_centers = n_centers;
          const ModelOutput a = evaluate_graph(m, v), b = eager.evaluate(v);
          ASSERT_EQ(b.atom_energy.size(0), n_centers);
          EXPECT_LE(max_rel_difference(a.atom_energy, b.atom_energy), 1e-12);
          EXPECT_LE(max_rel_difference(a.edge_grad, b.edge_grad), 1e-11);
          {
            const KernelChoiceScope aten(KernelChoice::aten);
            const DeviceValueChecksPaused as_recorded;
            const ModelOutput r = eager.evaluate(v);
            EXPECT_LE(max_rel_difference(a.atom_energy, r.atom_energy), 1e-12);
            EXPECT_LE(max_rel_difference(a.edge_grad, r.edge_grad), 1e-11);
          }
          if (c.architecture == "mace_heads") {
            Model chosen = m;
            chosen.select_head(model_heads(m.metadata().hyperparameters).back());
            GraphCapture eager_chosen(chosen, /*record=*/false);
            const ModelOutput ca = evaluate_graph(chosen, v), cb = eager_chosen.evaluate(v);
            EXPECT_GT(max_rel_difference(a.atom_energy, ca.atom_energy), 1e-6);   // another head's energies
            EXPECT_LE(max_rel_difference(ca.atom_energy, cb.atom_energy), 1e-12);
            EXPECT_LE(max_rel_difference(ca.edge_grad, cb.edge_grad), 1e-11);
          }
          GroupCapacity cap;
          GroupedGraph out;
          group_graph(v, rule, cap, out);
          ASSERT_EQ(cap.edges.size(), 2u);   // into centres, the rest
          std::vector<bool> real_node(out.species.size(), false), real_edge(out.n_edges(), false);
          for (int64_t i = 0; i < v.n_nodes; ++i) real_node[out.node_position[i]] = true;
          for (int64_t e = 0; e < v.n_edges; ++e) {
            real_edge[out.edge_position[e]] = true;
            EXPECT_EQ(out.edge_position[e] < cap.edges[0], full.index[e] < n_centers) << "edge " << e;
          }
          // padding edges on the padding centres in turn (a GPU's sums onto one would take them
          // one after another)
          std::vector<int64_t> padding_on(out.species.size(), 0);
          int64_t n_padding = 0, n_padding_centres = 0;
          for (int64_t e = 0; e < out.n_edges(); ++e) {
            if (real_edge[e]) continue;
            const int64_t from = out.edge_index[e], to = out.edge_index[out.n_edges() + e];
            ASSERT_TRUE(from == to && from < out.n_centers() && !real_node[from])
                << "padding edge " << e << ": " << from << " -> " << to;
            ++padding_on[static_cast<std::size_t>(from)], ++n_padding;
          }
          for (int64_t i = 0; i < out.n_centers(); ++i) n_padding_centres += real_node[i] ? 0 : 1;
          ASSERT_GT(n_padding_centres, 1);
          EXPECT_EQ(*std::max_element(padding_on.begin(), padding_on.end()),
                    (n_padding + n_padding_centres - 1) / n_padding_centres);
        }
      }
    }
  }
}

TEST(GroupedGraph, BadGraphsAndModelsAreErrors) {
  const Model m = make_model({"se_e2_a", torch::kFloat64});
  const Structure s = sample(3);
  const testing::StructureGraph full(m, s);
  const GroupingRule rule = GroupingRule::of(m);
  const auto error_of = [&](const GraphView& v) -> std::string {
    GroupCapacity cap;
    GroupedGraph out;
    try {
      group_graph(v, rule, cap, out);
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  std::vector<int64_t> species = full.species, index = full.index;
  GraphView v = full.view();
  species[3] = 2;
  v.species = species.data();
  EXPECT_NE(error_of(v).find("node 3 has species index 2, outside the model's 2"), std::string::npos) << error_of(v);
  v = full.view();
  index[full.ne + 5] = full.n;
  v.edge_index = index.data();
  EXPECT_NE(error_of(v).find("edge 5 ("), std::string::npos) << error_of(v);
  GroupingRule table = rule;
  table.shortest = 1.5;   // a compressed model's table
  GroupCapacity cap;
  GroupedGraph out;
  try {
    group_graph(full.view(), table, cap, out);
    ADD_FAILURE() << "no error for an edge shorter than the table";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("closer than its embedding table covers"), std::string::npos) << e.what();
  }
  try {
    ModelMetadata older;   // a model file written before forward_grouped() (as Model::load reads it)
    older.architecture = "painn";
    older.message_passing_layers = 2;
    GroupingRule::of(older);
    ADD_FAILURE() << "no error for a model without forward_grouped";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("has no forward_grouped()"), std::string::npos) << e.what();
  }
  try {
    GraphCapture recorded(m, /*record=*/true);
    ADD_FAILURE() << "recording a CPU model";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA graphs need the model on a GPU"), std::string::npos) << e.what();
  }
}

// se_e2_a against a loop-by-loop implementation of the formulas in potentials/src/se_e2_a.cpp's
// header, with std::tanh and one atom at a time. The TorchScript evaluates the tanh layers
// through sigmoids with the constants folded into weights, and the contraction in a padded
// batched layout; this checks both against the plain definition.
std::vector<double> se_e2_a_direct(const BuiltModel& built, const Structure& s) {
  const auto& hp = built.metadata.hyperparameters;
  auto param = [&](const std::string& name) {
    return built.module.attr(name).toTensor().to(torch::kFloat64).contiguous();
  };
  const double rc = built.metadata.cutoff, rs = hp.at("rcut_smth").get<double>();
  const bool one_side = hp.at("type_one_side").get<bool>();
  const auto axis = hp.at("axis_neurons").get<int64_t>();
  const int64_t ns = static_cast<int64_t>(built.metadata.species.size());
  std::vector<int64_t> emb = {1}, fit;
  for (const auto& w : hp.at("embedding")) emb.push_back(w.get<int64_t>());
  const int64_t m1 = emb.back();
  fit = {m1 * axis};
  for (const auto& w : hp.at("fitting")) fit.push_back(w.get<int64_t>());
  // y = tanh(x W + b), plus x (same width) or [x, x] (doubled width)
  auto mlp = [&](std::vector<double> x, const std::string& prefix, const std::vector<int64_t>& widths, int64_t net) {
    for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
      const torch::Tensor w = param(prefix + "_w" + std::to_string(l))[net];
      const torch::Tensor b = param(prefix + "_b" + std::to_string(l))[net];
      std::vector<double> y(widths[l + 1]);
      for (int64_t o = 0; o < widths[l + 1]; ++o) {
        double z = b[o].item<double>();
        for (int64_t k = 0; k < widths[l]; ++k) z += x[k] * w[k][o].item<double>();
        y[o] = std::tanh(z);
        if (widths[l + 1] == widths[l]) y[o] += x[o];
        else if (widths[l + 1] == 2 * widths[l]) y[o] += x[o % widths[l]];
      }
      x = y;
    }
    return x;
  };
  const torch::Tensor env_std = param("env_std"), shift = param("energy_shift"), scale = param("energy_scale");
  const double inv_norm = param("inv_neighbor_norm")[0].item<double>();
  const std::string out = std::to_string(fit.size() - 1);
  const torch::Tensor w_out = param("fit_w" + out), b_out = param("fit_b" + out);
  std::vector<int64_t> type(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) type[i] = built.metadata.species_index(element_symbol(s.numbers[i]));
  const NeighborList nl = build_neighbor_list(s, rc);
  // With sel (DeePMD-kit's layout): every centre has sel[t] slots for neighbours of species t;
  // neighbours fill some, the others stay empty (s = 0); every slot enters as (s - avg) / std_r.
  const std::vector<int64_t> sel = hp.value("sel", std::vector<int64_t>{});
  const torch::Tensor env_avg = sel.empty() ? torch::zeros({ns}, torch::kFloat64) : param("env_avg");
  std::vector<std::vector<double>> t(s.size(), std::vector<double>(4 * m1, 0.0));  // T_i, 4 x M1
  auto add_slot = [&](int64_t i, int64_t j_type, double sr, const Vec3& dir) {
    const double sd_r = env_std[type[i]][0].item<double>(), sd_a = env_std[type[i]][1].item<double>();
    const double x = (sr - env_avg[type[i]].item<double>()) / sd_r;
    const double env[4] = {x, sr * dir[0] / sd_a, sr * dir[1] / sd_a, sr * dir[2] / sd_a};
    const std::vector<double> g = mlp({x}, "emb", emb, one_side ? j_type : type[i] * ns + j_type);
    for (int k = 0; k < 4; ++k)
      for (int64_t m = 0; m < m1; ++m) t[i][k * m1 + m] += inv_norm * env[k] * g[m];
  };
  std::vector<std::vector<int64_t>> filled(s.size(), std::vector<int64_t>(ns, 0));
  for (std::size_t e = 0; e < nl.size(); ++e) {
    const int64_t i = nl.centers[e], j = nl.neighbors[e];
    const Vec3& v = nl.vectors[e];
    const double r = norm(v), u = std::clamp((r - rs) / (rc - rs), 0.0, 1.0);
    const double sw = u * u * u * (-6 * u * u + 15 * u - 10) + 1;
    add_slot(i, type[j], sw / r, {v[0] / r, v[1] / r, v[2] / r});
    ++filled[i][type[j]];
  }
  for (std::size_t i = 0; i < s.size() && !sel.empty(); ++i)
    for (int64_t tj = 0; tj < ns; ++tj) {
      EXPECT_LE(filled[i][tj], sel[tj]) << "the test's structure must fit the slots";
      for (int64_t k = filled[i][tj]; k < sel[tj]; ++k) add_slot(static_cast<int64_t>(i), tj, 0.0, {0, 0, 0});
    }
  std::vector<double> energy(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    std::vector<double> d(m1 * axis, 0.0);  // D = T^T T[:, :axis]
    for (int64_t a = 0; a < m1; ++a)
      for (int64_t b = 0; b < axis; ++b)
        for (int k = 0; k < 4; ++k) d[a * axis + b] += t[i][k * m1 + a] * t[i][k * m1 + b];
    const std::vector<double> y = mlp(d, "fit", fit, type[i]);
    double raw = b_out[type[i]][0].item<double>();
    for (std::size_t k = 0; k < y.size(); ++k) raw += y[k] * w_out[type[i]][k][0].item<double>();
    energy[i] = scale[type[i]].item<double>() * raw + shift[type[i]].item<double>();
  }
  return energy;
}

TEST(SeE2A, MatchesItsFormulasEvaluatedDirectly) {
  for (const std::string arch : {"se_e2_a", "se_e2_a_two_side", "se_e2_a_sel", "se_e2_a_sel_two_side",
                                  "se_e2_a_residual", "se_e2_a_sel_residual"}) {
    for (const torch::Dtype dtype : {torch::kFloat64, torch::kFloat32}) {
      SCOPED_TRACE(arch + (dtype == torch::kFloat32 ? " float32" : " float64"));
      const BuiltModel built = build(Case{arch, dtype});
      const Model model(built.module, built.metadata, torch::kCPU);
      const Structure s = sample(3);
      const auto got = evaluate_reference(model, s);
      const auto want = se_e2_a_direct(built, s);
      ASSERT_EQ(got.atom_energy.size(), want.size());
      double spread = 0;  // the energies minus their species shift vary by this much
      for (std::size_t i = 0; i < want.size(); ++i) spread = std::max(spread, std::abs(want[i] - want[0]));
      ASSERT_GT(spread, 1e-3);  // a model that ignores its input would not pass unnoticed
      for (std::size_t i = 0; i < want.size(); ++i) {
        EXPECT_NEAR(got.atom_energy[i], want[i], (dtype == torch::kFloat32 ? 2e-5 : 1e-11) * std::abs(want[i])) << i;
      }
    }
  }
}

// The model's embedding() method (the sel padding's G_t(b) and the compressed model's tables)
// against the nets' definition, y = tanh(x W + b) plus x or [x, x], also where the first layer is
// residual (1 -> 1 or 1 -> 2, where the sigmoid form first rescales x).
TEST(SeE2A, EmbeddingMethodIsTheNetsDefinition) {
  for (const auto& [arch, widths] : {std::pair<std::string, std::vector<int64_t>>{"se_e2_a", {1, 8, 16}},
                                     {"se_e2_a_residual", {1, 2, 4}}}) {
    SCOPED_TRACE(arch);
    const BuiltModel built = build(Case{arch, torch::kFloat64});
    const torch::Tensor x = torch::linspace(-1.5, 3.0, 7, torch::kFloat64).unsqueeze(1);
    for (int64_t t = 0; t < 2; ++t) {
      torch::Tensor y = x;
      for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
        const torch::Tensor w = built.module.attr("emb_w" + std::to_string(l)).toTensor()[t];
        const torch::Tensor b = built.module.attr("emb_b" + std::to_string(l)).toTensor()[t];
        ASSERT_EQ(w.size(1), widths[l + 1]);
        const torch::Tensor h = torch::tanh(torch::addmm(b, y, w));
        y = widths[l + 1] == widths[l] ? y + h : widths[l + 1] == 2 * widths[l] ? torch::cat({y, y}, 1) + h : h;
      }
      const torch::Tensor got = built.module.get_method("embedding")({x, t}).toTensor();
      EXPECT_TRUE(torch::allclose(got, y, 1e-12, 1e-12)) << "net " << t << "\n" << got - y;
    }
  }
}

// energies_grouped() (the trainer's recorded steps, the GPU's MD step) against energies(): centre
// groups of equal sizes take every species' fitting net at once (batched products), other groups
// go species by species. Energies, and the gradients a force loss takes of them (along t_sum, then
// that along the parameters), are the same, the residual fitting layers' too.
TEST(SeE2A, GroupedEnergiesEqualThePlainOnesForEqualAndOtherGroups) {
  for (const std::string arch : {"se_e2_a", "se_e2_a_residual"}) {
    const BuiltModel built = build(Case{arch, torch::kFloat64});
    torch::jit::Module m = built.module;
    const int64_t m1 = arch == "se_e2_a" ? 16 : 4;
    for (const std::vector<int64_t>& groups : {std::vector<int64_t>{5, 5}, std::vector<int64_t>{3, 6},
                                               std::vector<int64_t>{0, 4}}) {
      SCOPED_TRACE(arch + " groups " + std::to_string(groups[0]) + ", " + std::to_string(groups[1]));
      const int64_t n = groups[0] + groups[1];
      const torch::Tensor species = torch::cat({torch::zeros({groups[0]}, torch::kInt64), torch::ones({groups[1]}, torch::kInt64)});
      const torch::Tensor t_sum = torch::randn({n, 4, m1}, torch::kFloat64).requires_grad_(true);
      const torch::Tensor w0 = m.attr("fit_w0").toTensor();
      std::vector<torch::Tensor> outs;
      for (const char* method : {"energies", "energies_grouped"}) {
        const torch::Tensor e =
            std::string(method) == "energies"
                ? m.get_method(method)({species, t_sum, n}).toTensor()
                : m.get_method(method)({species, t_sum, c10::List<int64_t>(groups)}).toTensor();
        const torch::Tensor g = torch::autograd::grad({(e * e).sum()}, {t_sum}, {}, true, true)[0];
        const torch::Tensor gw = torch::autograd::grad({(g * g).sum()}, {w0})[0];   // a force loss's path
        outs.insert(outs.end(), {e.detach(), g.detach(), gw});
      }
      ASSERT_EQ(outs[0].size(0), n);
      for (int k = 0; k < 3; ++k)
        EXPECT_TRUE(torch::allclose(outs[k], outs[k + 3], 1e-11, 1e-12)) << "output " << k << "\n" << outs[k] - outs[k + 3];
    }
  }
}

// sel "auto": DeePMD-kit's rule (1.1 x the most neighbours of each species a centre has, its integer
// part rounded up to a multiple of 4) from the statistics' frames, then DeePMD-kit's statistics over all those slots.
TEST(SeE2A, AutoSelAndItsStatistics) {
  const std::vector<Structure> structures = {sample(2), sample(3), sample(4)};
  std::vector<Frame> frames;
  for (const auto& s : structures) frames.push_back(make_frame(s, kCutoff));
  std::vector<const Frame*> ptrs;
  for (const auto& f : frames) ptrs.push_back(&f);
  // By hand, from independent neighbour lists: H is species 0, O species 1.
  const double rs = 2.0;
  std::vector<int64_t> most(2, 0);
  std::vector<double> centers(2, 0), sum_s(2, 0), sum_s2(2, 0);
  for (const auto& s : structures) {
    const NeighborList nl = build_neighbor_list(s, kCutoff);
    std::vector<std::array<int64_t, 2>> count(s.size(), {0, 0});
    for (std::size_t i = 0; i < s.size(); ++i) centers[s.numbers[i] == 8] += 1;
    for (std::size_t e = 0; e < nl.size(); ++e) {
      const int64_t i = nl.centers[e], j = nl.neighbors[e];
      const int64_t tj = s.numbers[j] == 8, ti = s.numbers[i] == 8;
      most[tj] = std::max(most[tj], ++count[i][tj]);
      const double r = norm(nl.vectors[e]), u = std::clamp((r - rs) / (kCutoff - rs), 0.0, 1.0);
      const double sr = (u * u * u * (-6 * u * u + 15 * u - 10) + 1) / r;
      sum_s[ti] += sr;
      sum_s2[ti] += sr * sr;
    }
  }
  ASSERT_GT(most[0], 4);
  ASSERT_GT(most[1], 2);
  for (const auto& [given, ratio] : {std::pair<std::string, double>{"auto", 1.1}, {"auto:2", 2.0}}) {
    SCOPED_TRACE(given);
    ModelSpec spec;
    spec.architecture = "se_e2_a";
    spec.species = {"H", "O"};
    spec.cutoff = kCutoff;
    spec.seed = 3;
    spec.hyperparameters = {{"embedding", {8, 16}}, {"axis_neurons", 4}, {"fitting", {16, 16}}, {"rcut_smth", rs}, {"sel", given}};
    BuiltModel automatic = build_model(spec);
    fit_descriptor_statistics(automatic, ptrs);
    std::vector<int64_t> want(2);
    for (int t = 0; t < 2; ++t) want[t] = 4 * ((static_cast<int64_t>(most[t] * ratio) + 3) / 4);
    EXPECT_EQ(automatic.metadata.hyperparameters.at("sel").get<std::vector<int64_t>>(), want);
    const auto buffer = [&](const BuiltModel& b, const char* name) { return b.module.attr(name).toTensor(); };
    const double slots = static_cast<double>(want[0] + want[1]);
    EXPECT_EQ(buffer(automatic, "env_sel")[1].item<double>(), static_cast<double>(want[1]));
    EXPECT_NEAR(buffer(automatic, "inv_neighbor_norm")[0].item<double>(), 1.0 / slots, 1e-15);
    for (int t = 0; t < 2; ++t) {   // mean and spread over every slot, the empty ones (s = 0) included
      const double n = centers[t] * slots, avg = sum_s[t] / n;
      EXPECT_NEAR(buffer(automatic, "env_avg")[t].item<double>(), avg, 1e-12) << t;
      EXPECT_NEAR(buffer(automatic, "env_std")[t][0].item<double>(), std::max(std::sqrt(sum_s2[t] / n - avg * avg), 1e-2), 1e-12) << t;
    }
    // The same model as one given those counts.
    spec.hyperparameters["sel"] = want;
    BuiltModel explicit_sel = build_model(spec);
    fit_descriptor_statistics(explicit_sel, ptrs);
    const Model a(automatic.module, automatic.metadata, torch::kCPU), b(explicit_sel.module, explicit_sel.metadata, torch::kCPU);
    const auto ea = evaluate_reference(a, structures[0]), eb = evaluate_reference(b, structures[0]);
    EXPECT_EQ(ea.energy, eb.energy);
    EXPECT_EQ(ea.forces, eb.forces);
  }
}

TEST(Potentials, BadHyperparametersAreNamed) {
  ModelSpec spec;
  spec.architecture = "se_e2_a";
  spec.species = {"H", "O"};
  spec.hyperparameters = {{"embeding", {8, 16}}};
  try {
    build_model(spec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown hyperparameter 'embeding'"), std::string::npos) << e.what();
  }
  spec.hyperparameters = {{"axis_neurons", "four"}};
  EXPECT_THROW(build_model(spec), Error);
  spec.hyperparameters = {{"sel", {46}}};   // one count for two species
  try {
    build_model(spec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("se_e2_a: hyperparameter 'sel' needs one count per species (2)"), std::string::npos)
        << e.what();
  }
  for (const char* bad : {"auto:0", "auto:x", "most"}) {
    spec.hyperparameters = {{"sel", bad}};
    try {
      build_model(spec);
      FAIL() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("hyperparameter 'sel' must be a count per species, \"auto\" or \"auto:R\""),
                std::string::npos) << e.what();
    }
  }
  spec.hyperparameters = nlohmann::json::object();
  spec.architecture = "allegro";
  try {
    build_model(spec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown architecture 'allegro'"), std::string::npos) << e.what();
  }
  spec.architecture = "mace";
  spec.hyperparameters = {{"max_L", 3}, {"max_ell", 2}};
  try {
    build_model(spec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("mace: hyperparameter 'max_L' must not exceed max_ell"), std::string::npos)
        << e.what();
  }
  // mace-torch's variants (mace_radial.h): a value it does not have, or a setting of an option that
  // is off, is named.
  const std::vector<std::pair<nlohmann::json, std::string>> mace_cases = {
      {{{"gate", "relu"}}, "hyperparameter 'gate' must be silu, tanh, abs or None"},
      {{{"distance_transform", "Soft"}}, "hyperparameter 'distance_transform' must be None or Agnesi"},
      {{{"bessel_weights", {1.0, 2.0}}}, "hyperparameter 'bessel_weights' must have num_radial_basis (8) values"},
      {{{"interaction", "RealAgnosticInteractionBlock"}}, "hyperparameter 'interaction' must be"},
      {{{"interaction_first", "RealAgnosticAttResidualInteractionBlock"}}, "hyperparameter 'interaction_first'"},
      {{{"agnesi", {{"q", 1.0}}}}, "unknown hyperparameter 'agnesi'"},
      {{{"zbl", {{"a_exp", 0.3}}}}, "unknown hyperparameter 'zbl'"},
      {{{"edge_irreps", "8x0e+4x1o"}}, "hyperparameter 'edge_irreps' must have the same channels"},
      {{{"edge_irreps", "8x0e+8x1e"}}, "hyperparameter 'edge_irreps' must be channels of l = 0, 1, ..."},
      {{{"edge_irreps", "8x0e+8x1o+8x2e+8x3o+8x4e"}}, "hyperparameter 'edge_irreps' must not go beyond max_ell"},
      {{{"use_edge_irreps_first", true}}, "hyperparameter 'use_edge_irreps_first' needs edge_irreps"}};
  for (const auto& [hp, message] : mace_cases) {
    spec.hyperparameters = hp;
    spec.hyperparameters["num_channels"] = 4;
    try {
      build_model(spec);
      ADD_FAILURE() << hp.dump() << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(message), std::string::npos) << e.what();
    }
  }
}

// The ZBL prior: zero wherever the data was (so training is unchanged), the ZBL energy well below.
double zbl(double r, double z1, double z2) {
  const double x = r * (std::pow(z1, 0.23) + std::pow(z2, 0.23)) / 0.4685;
  const double phi = 0.18175 * std::exp(-3.19980 * x) + 0.50986 * std::exp(-0.94229 * x) +
                     0.28022 * std::exp(-0.40290 * x) + 0.02817 * std::exp(-0.20162 * x);
  return 14.399645 * z1 * z2 / r * phi;
}

TEST(Repulsion, ZeroOnTrainingDataAndZblBelowIt) {
  for (const auto& arch : architectures()) {
    SCOPED_TRACE(arch);
    BuiltModel plain = build({arch, torch::kFloat64, false});
    BuiltModel prior = build({arch, torch::kFloat64, true});
    // "Training data": the random structure, whose shortest pairs set the inner radii.
    const Structure s = sample(5);
    const Frame frame = make_frame(s, kCutoff);
    fit_repulsion(prior, {&frame});
    const auto inner = prior.metadata.hyperparameters.at("repulsion").at("inner");
    ASSERT_TRUE(inner.contains("H-O") && inner.contains("H-H") && inner.contains("O-O")) << inner.dump();
    EXPECT_GE(inner.at("H-O").get<double>(), 0.8);  // sample() keeps every pair >= 0.8 A apart
    const Model a(plain.module, plain.metadata, torch::kCPU), b(prior.module, prior.metadata, torch::kCPU);
    const auto ea = evaluate_reference(a, s), eb = evaluate_reference(b, s);
    // Equal up to the order of floating-point sums (the prior adds exact zeros).
    EXPECT_NEAR(ea.energy, eb.energy, 1e-12 * std::abs(ea.energy));
    for (std::size_t i = 0; i < s.size(); ++i)
      for (int d = 0; d < 3; ++d) EXPECT_NEAR(ea.forces[i][d], eb.forces[i][d], 1e-12);

    // An O-O dimer (alone in a large open box) well below the data's shortest O-O distance, and
    // in the switching region: the difference is the ZBL pair energy times the switch.
    const double r_oo = inner.at("O-O").get<double>(), width = 0.5;
    for (double r : {0.6, r_oo - 0.75 * width, r_oo - 0.25 * width, r_oo + 0.1}) {
      Structure d;
      d.cell.pbc = {false, false, false};
      d.positions = {{0, 0, 0}, {r, 0, 0}};
      d.numbers = {8, 8};
      const double u = std::clamp((r - r_oo + width) / width, 0.0, 1.0);
      const double sw = 1.0 - u * u * u * (6 * u * u - 15 * u + 10);
      const double diff = evaluate_reference(b, d).energy - evaluate_reference(a, d).energy;
      EXPECT_NEAR(diff, zbl(r, 8, 8) * sw, 1e-10 * std::max(1.0, zbl(r, 8, 8))) << "r = " << r;
    }
  }
}

TEST(Repulsion, BadSettingsAreNamed) {
  ModelSpec spec;
  spec.architecture = "se_e2_a";
  spec.species = {"O"};
  spec.repulsion = "lj";
  try {
    build_model(spec);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("repulsion 'lj'"), std::string::npos) << e.what();
  }
}

INSTANTIATE_TEST_SUITE_P(AllModels, Potential,
                         ::testing::Values(Case{"se_e2_a", torch::kFloat64}, Case{"se_e2_a", torch::kFloat32},
                                           Case{"painn", torch::kFloat64}, Case{"painn", torch::kFloat32},
                                           Case{"se_e2_a", torch::kFloat64, true},
                                           Case{"se_e2_a_two_side", torch::kFloat64},
                                           Case{"se_e2_a_sel", torch::kFloat64}, Case{"se_e2_a_sel_two_side", torch::kFloat32},
                                           Case{"painn", torch::kFloat32, true},
                                           Case{"mace", torch::kFloat64}, Case{"mace", torch::kFloat32},
                                           Case{"mace_nonlinear", torch::kFloat64}, Case{"mace_heads", torch::kFloat64}),
                         case_name);

}  // namespace
}  // namespace mlip
