// The model contract: save/load with metadata, energies, forces and virials from edge gradients
// (checked against finite differences), and clear errors for bad model files.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <random>

#include <caffe2/serialize/inline_container.h>
#include <torch/version.h>

#include "mlip/error.h"
#include "mlip/data/file_io.h"
#include "mlip/data/io.h"
#include "support/morse_model.h"
#include "support/reference.h"
#include "support/source_dir.h"
#include "support/temp_dir.h"
#include "support/test_models.h"

namespace mlip {
namespace {

namespace fs = std::filesystem;

using testing::Evaluation;

Evaluation evaluate(const Model& model, const Structure& s) { return testing::evaluate_reference(model, s); }

Structure periodic_sample() {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(-0.25, 0.25);
  Structure s;
  s.cell.lattice = {{{4.2, 0, 0}, {0.6, 4.0, 0}, {-0.3, 0.4, 4.4}}};
  s.cell.pbc = {true, true, true};
  for (int a = 0; a < 2; ++a)
    for (int b = 0; b < 2; ++b)
      for (int c = 0; c < 2; ++c) {
        Vec3 x{};
        for (int d = 0; d < 3; ++d)
          x[d] = (a + 0.5 + u(rng)) * s.cell.lattice[0][d] / 2 + (b + 0.5 + u(rng)) * s.cell.lattice[1][d] / 2 +
                 (c + 0.5 + u(rng)) * s.cell.lattice[2][d] / 2;
        s.positions.push_back(x);
        s.numbers.push_back((a + b + c) % 2 ? 8 : 1);
      }
  return s;
}

TEST(Model, ForcesAreMinusFiniteDifferenceGradient) {
  const Model model = testing::make_morse_model({"H", "O"}, 3.5);
  Structure s = periodic_sample();
  const Evaluation ev = evaluate(model, s);
  const double h = 1e-5;
  for (std::size_t i = 0; i < s.size(); ++i) {
    for (int d = 0; d < 3; ++d) {
      Structure p = s, m = s;
      p.positions[i][d] += h;
      m.positions[i][d] -= h;
      const double fd = -(evaluate(model, p).energy - evaluate(model, m).energy) / (2 * h);
      EXPECT_NEAR(ev.forces[i][d], fd, 1e-7) << "atom " << i << " dir " << d;
    }
  }
}

TEST(Model, VirialIsMinusFiniteStrainDerivative) {
  const Model model = testing::make_morse_model({"H", "O"}, 3.5);
  const Structure s = periodic_sample();
  const Evaluation ev = evaluate(model, s);
  const double h = 1e-6;
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) {
      auto strained = [&](double eps) {
        Structure t = s;
        auto apply = [&](Vec3& v) { v[b] += eps * v[a]; };  // x' = x (I + eps e_a e_b^T)
        for (auto& x : t.positions) apply(x);
        for (auto& row : t.cell.lattice) apply(row);
        return evaluate(model, t).energy;
      };
      const double dE = (strained(h) - strained(-h)) / (2 * h);
      EXPECT_NEAR(ev.virial[a][b], -dE, 1e-6) << a << b;
    }
  }
}

// edge_forces: per-group virials add up to the one-group virial, node virials are each edge's
// -r (x) g at its neighbour node, and a force loss differentiates through it (training's use).
TEST(EdgeForces, GroupsNodeVirialsAndGradientsAgreeWithPlainSums) {
  torch::manual_seed(3);
  const int64_t n = 5, ne = 12;
  const auto f64 = torch::kFloat64;
  const torch::Tensor index = torch::randint(0, n, {2, ne}, torch::kInt64);
  const torch::Tensor r = torch::randn({ne, 3}, f64), g = torch::randn({ne, 3}, f64);
  EdgeForceRequest all;
  all.virial = all.node_virial = true;
  all.edge_group = torch::tensor({0, 0, 1, 1, 1, 0, 2, 2, 1, 0, 2, 1}, torch::kInt64);
  all.n_groups = 3;
  const EdgeForces grouped = edge_forces(index, r, g, n, all);
  EdgeForceRequest one;
  one.virial = true;
  const EdgeForces single = edge_forces(index, r, g, n, one);   // the (3, 3) product path
  EXPECT_TRUE(torch::allclose(grouped.virial.sum(0), single.virial[0], 1e-14, 1e-14));
  EXPECT_TRUE(torch::allclose(grouped.node_virial.sum(0), single.virial[0], 1e-14, 1e-14));
  EXPECT_TRUE(torch::equal(grouped.forces, single.forces));
  auto ia = index.accessor<int64_t, 2>();
  auto ra = r.accessor<double, 2>(), ga = g.accessor<double, 2>();
  std::vector<double> force(3 * n, 0.0), node_virial(9 * n, 0.0), group_virial(27, 0.0);
  for (int64_t e = 0; e < ne; ++e) {
    const int64_t i = ia[0][e], j = ia[1][e], grp = all.edge_group[e].item<int64_t>();
    for (int a = 0; a < 3; ++a) {
      force[3 * i + a] += ga[e][a];
      force[3 * j + a] -= ga[e][a];
      for (int b = 0; b < 3; ++b) {
        node_virial[9 * j + 3 * a + b] -= ra[e][a] * ga[e][b];
        group_virial[9 * grp + 3 * a + b] -= ra[e][a] * ga[e][b];
      }
    }
  }
  auto expect_equal = [](const torch::Tensor& t, const std::vector<double>& v, const char* what) {
    const torch::Tensor c = t.contiguous();
    for (std::size_t k = 0; k < v.size(); ++k) EXPECT_NEAR(c.data_ptr<double>()[k], v[k], 1e-13) << what << " " << k;
  };
  expect_equal(grouped.forces, force, "force");
  expect_equal(grouped.node_virial, node_virial, "node virial");
  expect_equal(grouped.virial, group_virial, "group virial");

  // d(sum F^2)/dg_e = 2 (F_i - F_j) for edge e = (i, j).
  const torch::Tensor gv = g.clone().requires_grad_(true);
  const EdgeForces d = edge_forces(index, r, gv, n, all);
  d.forces.pow(2).sum().backward();
  const torch::Tensor expected = 2 * (d.forces.detach().index_select(0, index[0]) - d.forces.detach().index_select(0, index[1]));
  EXPECT_TRUE(torch::allclose(gv.grad(), expected, 1e-13, 1e-13));
}

TEST(Model, SaveLoadRoundTripKeepsMetadataAndEnergies) {
  Model model = testing::make_morse_model({"H", "O"}, 3.5);
  const fs::path dir = fs::temp_directory_path() / "mlip_test_model";
  fs::create_directories(dir);
  const std::string path = (dir / "morse.pt").string();
  ModelMetadata meta = model.metadata();
  meta.provenance = {{"test", "SaveLoadRoundTrip"}};
  save_model(model.module(), meta, path);
  const Model loaded = Model::load(path);
  EXPECT_EQ(loaded.metadata().species, (std::vector<std::string>{"H", "O"}));
  EXPECT_DOUBLE_EQ(loaded.metadata().cutoff, 3.5);
  EXPECT_EQ(loaded.metadata().provenance["test"], "SaveLoadRoundTrip");
  const Structure s = periodic_sample();
  EXPECT_DOUBLE_EQ(evaluate(model, s).energy, evaluate(loaded, s).energy);
}

TEST(Model, Float32ModelAgreesWithFloat64) {
  const Structure s = periodic_sample();
  const double e64 = evaluate(testing::make_morse_model({"H", "O"}, 3.5, torch::kFloat64), s).energy;
  const double e32 = evaluate(testing::make_morse_model({"H", "O"}, 3.5, torch::kFloat32), s).energy;
  EXPECT_NEAR(e32, e64, 1e-5 * std::abs(e64));
}

TEST(Model, BadFilesGiveClearErrors) {
  const fs::path dir = fs::temp_directory_path() / "mlip_test_model";
  fs::create_directories(dir);
  auto message_of = [](const std::string& path) {
    try {
      Model::load(path);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(message_of((dir / "missing.pt").string()).find("not found"), std::string::npos);

  const std::string garbage = (dir / "garbage.pt").string();
  std::ofstream(garbage) << "this is not a zip archive";
  EXPECT_NE(message_of(garbage).find("not a readable TorchScript model"), std::string::npos);

  Model model = testing::make_morse_model({"H", "O"}, 3.5);
  const std::string good = (dir / "good.pt").string();
  save_model(model.module(), model.metadata(), good);
  const std::string truncated = (dir / "truncated.pt").string();
  {
    std::ifstream in(good, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream(truncated, std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  }
  EXPECT_NE(message_of(truncated).find(truncated), std::string::npos);

  const std::string bare = (dir / "bare.pt").string();
  model.module().save(bare);
  EXPECT_NE(message_of(bare).find("no mlip/metadata.json"), std::string::npos);
}

// A write that fails midway (as on a full disk; here the file-size limit, which fails the same
// write(2) with EFBIG) ends in one mlip::Error naming the file and the cause: no exception out
// of LibTorch's writer, no PATH.tmp left behind, and the model already at PATH untouched.
TEST(Model, FailedSaveLeavesTheModelThereIntact) {
  const testing::TempDir dir("mlip_test_failed_save");
  const std::string path = (dir.path / "model.pt").string();
  Model model = testing::make_morse_model({"H", "O"}, 3.5);
  save_model(model.module(), model.metadata(), path);
  const std::string before = read_file(path);
  ASSERT_GT(before.size(), 2048u);

  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = saved;
  small.rlim_cur = 1024;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string error = "no error";
  try {
    ModelMetadata meta = model.metadata();
    meta.provenance = {{"test", "a second save that cannot be written"}};
    save_model(model.module(), meta, path);
  } catch (const Error& e) {
    error = e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);

  EXPECT_NE(error.find(path + ": cannot write model (" + path + ".tmp: write failed after 1024 of"),
            std::string::npos) << error;
  EXPECT_NE(error.find("File too large"), std::string::npos) << error;
  EXPECT_NE(error.find("the file there is left as it was"), std::string::npos) << error;
  EXPECT_FALSE(fs::exists(path + ".tmp"));
  EXPECT_EQ(read_file(path), before);
  EXPECT_NO_THROW(Model::load(path));
}

// One altered byte in any record of a saved model (weights, code, pickles, metadata, the digest)
// is rejected on load with the file's name: LibTorch itself loads a model whose weight bytes were
// changed. A directory gets its own message.
TEST(Model, AlteredBytesInAnyRecordAreRejectedNamingTheFile) {
  const fs::path dir = fs::temp_directory_path() / "mlip_test_model_digest";
  fs::create_directories(dir);
  const std::string good = (dir / "se_e2_a.pt").string();
  testing::write_test_model("se_e2_a", good);
  EXPECT_TRUE(Model::load(good).info().digest_checked);
  std::string bytes;
  {
    std::ifstream in(good, std::ios::binary);
    bytes.assign(std::istreambuf_iterator<char>(in), {});
  }
  caffe2::serialize::PyTorchStreamReader reader(good);
  int altered = 0;
  for (const std::string& name : reader.getAllRecords()) {
    if (name == ".data/serialization_id") continue;  // PyTorch's per-save id, not content
    const std::size_t offset = reader.getRecordOffset(name);
    const std::size_t size = std::get<1>(reader.getRecord(name));
    if (size == 0) continue;
    // A byte among the record's stored ones: a compressed record (PyTorch deflates the code's
    // debug_pkl) stores fewer bytes than its size, so its middle may lie past them.
    const std::size_t at = offset + std::min<std::size_t>(size / 2, 16);
    std::string copy = bytes;
    copy[at] = static_cast<char>(~copy[at]);
    const std::string bad = (dir / "altered.pt").string();
    std::ofstream(bad, std::ios::binary) << copy;
    try {
      Model::load(bad);
      ADD_FAILURE() << "a byte altered in record " << name << " was not noticed";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind(bad + ": ", 0), 0u) << name << ": " << e.what();
    }
    ++altered;
  }
  EXPECT_GT(altered, 10);
  try {
    Model::load(dir.string());
    ADD_FAILURE() << "a directory loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("is a directory, not a model file"), std::string::npos) << e.what();
  }
}

TEST(Model, MetadataValidationNamesTheKey) {
  nlohmann::json j = testing::make_morse_model({"H"}, 3.0).metadata().to_json();
  j["species"] = {"H", "Xx"};
  try {
    ModelMetadata::from_json(j, "m.pt");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'Xx' is not an element"), std::string::npos) << e.what();
  }
  j.erase("cutoff");
  EXPECT_THROW(ModelMetadata::from_json(j, "m.pt"), Error);
}

// Model files written by an older stack (LibTorch 1.13.1, tests/data/libtorch-1.13/README.md) load
// in this build and give the energies and forces that LibTorch 1.13 computed for them. This is
// also the alarm for the TorchScript deprecation (docs/model-format.md): a LibTorch that stops
// loading TorchScript archives fails here first.
TEST(ModelFormat, FilesFromLibTorch113GiveTheSameEnergiesAndForces) {
  const fs::path dir = fs::path(mlip::testing::source_dir()) / "tests/data/libtorch-1.13";
  const Structure s = read_extxyz((dir / "water.xyz").string()).at(0);
  std::ifstream in(dir / "reference.json");
  const nlohmann::json ref = nlohmann::json::parse(in);
  for (const char* name : {"se_e2_a.pt", "painn.pt"}) {
    SCOPED_TRACE(name);
    std::unique_ptr<Model> model;
    try {
      model = std::make_unique<Model>(Model::load((dir / name).string()));
    } catch (const Error& e) {
      FAIL() << "this LibTorch (" << TORCH_VERSION << ") no longer loads a TorchScript model file written by "
             << "LibTorch 1.13: see docs/model-format.md for the exit path. " << e.what();
    }
    const Evaluation ev = evaluate(*model, s);
    const auto& energy = ref.at(name).at("atom_energy");
    const auto& forces = ref.at(name).at("forces");
    ASSERT_EQ(energy.size(), s.size());
    double total = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      EXPECT_NEAR(ev.atom_energy[i], energy[i].get<double>(), 1e-10) << "atom " << i;
      total += energy[i].get<double>();
      for (int d = 0; d < 3; ++d) EXPECT_NEAR(ev.forces[i][d], forces[i][d].get<double>(), 1e-10) << "atom " << i;
    }
    EXPECT_NEAR(ev.energy, total, 1e-9);
  }
}

}  // namespace
}  // namespace mlip
