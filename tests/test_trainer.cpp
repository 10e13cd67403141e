// mlip-trainer's parts: config checking, loss terms, energy-shift fit, schedules, and
// checkpoint/resume equality (interrupted + resumed == uninterrupted, bitwise on CPU).
#include <gtest/gtest.h>

#include <limits>
#include <numeric>
#include <thread>
#include <mutex>
#include <atomic>

#include <cmath>
#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <algorithm>

#include <nlohmann/json.hpp>
#include <torch/autograd.h>
#include <ATen/ops/_foreach_mul.h>

#include "checkpoint.h"
#include "communicator.h"
#include "config.h"
#include "mlip/model/device.h"
#include "mlip/model/kernel_profile.h"
#include "mlip/model/runtime.h"
#include "mlip/ops/activation.h"
#include "mlip/error.h"
#include "support/gpu.h"
#include "support/reference.h"
#include "support/source_dir.h"
#include "support/test_models.h"
#include "support/temp_dir.h"
#include "mlip/data/io.h"
#include "frame_bank.h"
#include "prefetch.h"
#include "recorded_step.h"
#include "training.h"
#include "watchdog.h"

namespace mlip::trainer {
namespace {

namespace fs = std::filesystem;

using testing::TempDir;

const char* kMinimal = R"(model:
  architecture: se_e2_a
  species: [H, O]
  cutoff: 4.0
data:
  train: [frames.xyz]
)";

std::string error_of(const std::string& path, const std::vector<std::string>& overrides = {}) {
  try {
    read_config(path, overrides);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

// Trains the config at `path` with `overrides` (resuming when asked) on one process: the
// mlip::Error it ends with, or "no error".
std::string train_error(const std::string& path, const std::vector<std::string>& overrides, bool resume = false) {
  SerialCommunicator comm;
  try {
    Trainer t(read_config(path, overrides), "", comm);
    t.run(resume);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Config, DefaultsAndOverrides) {
  TempDir dir("mlip_test_config");
  const std::string path = dir.file("c.yaml", kMinimal);
  const Config c = read_config(path, {"training.epochs=7", "training.optimizer.lr=2e-4", "model.hyperparameters={embedding: [4, 8]}"});
  EXPECT_EQ(c.model.architecture, "se_e2_a");
  EXPECT_EQ(c.model.species, (std::vector<std::string>{"H", "O"}));
  EXPECT_EQ(c.epochs, 7);
  EXPECT_DOUBLE_EQ(c.lr, 2e-4);
  EXPECT_EQ(c.model.hyperparameters["embedding"], nlohmann::json({4, 8}));
  EXPECT_EQ(c.train.at(0).path, "frames.xyz");
  EXPECT_DOUBLE_EQ(c.validation_fraction, 0.1);
}

TEST(Config, ErrorsNameFileLineAndKey) {
  TempDir dir("mlip_test_config_errors");
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                              : ::testing::AssertionFailure() << "'" << msg << "' lacks '" << part << "'";
  };
  const std::string typo = dir.file("typo.yaml", std::string(kMinimal) + "training:\n  epochs: 3\n  learnign_rate: 0.1\n");
  EXPECT_TRUE(has(error_of(typo), "typo.yaml:9: unknown key 'training.learnign_rate'"));
  const std::string type = dir.file("type.yaml", std::string(kMinimal) + "training:\n  epochs: many\n");
  EXPECT_TRUE(has(error_of(type), "type.yaml:8: key 'training.epochs' has the wrong type"));
  const std::string missing = dir.file("missing.yaml", "model:\n  architecture: se_e2_a\n  cutoff: 4.0\ndata:\n  train: [a.xyz]\n");
  EXPECT_TRUE(has(error_of(missing), "missing required key 'model.species'"));
  const std::string nested = dir.file("nested.yaml", std::string(kMinimal) + "  batch: {frame: 2}\n");
  EXPECT_TRUE(has(error_of(nested), "unknown key 'data.batch.frame'"));
  const std::string bad_opt = dir.file("opt.yaml", std::string(kMinimal) + "training:\n  optimizer: {type: sgd}\n");
  EXPECT_TRUE(has(error_of(bad_opt), "training.optimizer.type must be adam or adamw"));
  const std::string bad_lr = dir.file("lr.yaml", std::string(kMinimal) + "training:\n  optimizer:\n    lr: -1.0e-3\n");
  EXPECT_TRUE(has(error_of(bad_lr), "lr.yaml:9: training.optimizer.lr must be positive and finite, not -0.001"));
  EXPECT_TRUE(has(error_of(bad_lr, {"training.optimizer.lr=.nan"}), "training.optimizer.lr must be positive and finite"));
  EXPECT_TRUE(has(error_of(bad_lr, {"training.optimizer.lr=1e300", "model.dtype=float32"}),
                  "training.optimizer.lr must be positive and finite in float32 (model.dtype)"));
  EXPECT_EQ(error_of(bad_lr, {"training.optimizer.lr=1e300"}), "no error");   // float64 holds it
  EXPECT_TRUE(has(error_of(bad_lr, {"training.optimizer.lr=1e-3", "training.optimizer.weight_decay=-1"}),
                  "training.optimizer.weight_decay must be >= 0 and finite, not -1"));
  const std::string syntax = dir.file("syntax.yaml", "model: [unclosed\n");
  EXPECT_TRUE(has(error_of(syntax), "syntax.yaml:"));
  EXPECT_TRUE(has(error_of(typo, {"nokey"}), "expected key.subkey=value"));
  EXPECT_TRUE(has(error_of((dir.path / "absent.yaml").string()), "cannot open config file"));
  // Keys given twice (yaml-cpp would read the first silently), syntax errors with the column, and
  // a --set value of the wrong type named by its --set argument.
  const std::string twice = dir.file("twice.yaml", std::string(kMinimal) + "training:\n  epochs: 3\n  epochs: 30\n");
  EXPECT_TRUE(has(error_of(twice), "twice.yaml:9: duplicate key 'epochs' (first at line 8)"));
  const std::string twice_top = dir.file("twice_top.yaml", std::string(kMinimal) + "data:\n  train: [b.xyz]\n");
  EXPECT_TRUE(has(error_of(twice_top), "twice_top.yaml:7: duplicate key 'data' (first at line 5)"));
  const std::string colon = dir.file("colon.yaml", "model:\n  cutoff: [4.0\n  species: x\n");
  EXPECT_TRUE(has(error_of(colon), "colon.yaml:"));
  EXPECT_TRUE(has(error_of(colon), ": YAML syntax error"));
  EXPECT_TRUE(has(error_of(typo, {"training.epochs=many"}),
                  "--set 'training.epochs=many': key 'training.epochs' has the wrong type"));
  EXPECT_TRUE(has(error_of(typo, {"training.epochs=5", "training.epochs=many"}), "--set 'training.epochs=many'"));
  EXPECT_TRUE(has(error_of(typo, {"training.optimizer.type=sgd"}),
                  "--set 'training.optimizer.type=sgd': training.optimizer.type must be adam or adamw"));
}

// A batch of two frames with hand-set predictions, to check each loss term by hand.
struct TinyBatch {
  BatchTensors t;
  Prediction p;
  TinyBatch() {
    t.n_frames = 2;
    t.n_atoms = 3;  // frame 0: atoms 0, 1; frame 1: atom 2
    t.frame_of_atom = torch::tensor({0, 0, 1}, torch::kInt64);
    t.atoms_per_frame = torch::tensor({2.0, 1.0}, torch::kFloat64);
    t.energy = torch::tensor({1.0, 2.0}, torch::kFloat64);
    t.has_energy = torch::tensor({1.0, 1.0}, torch::kFloat64);
    t.forces = torch::zeros({3, 3}, torch::kFloat64);
    t.has_forces_atom = torch::tensor({1.0, 1.0, 0.0}, torch::kFloat64);  // frame 1 has no forces
    t.virial = torch::zeros({2, 9}, torch::kFloat64);
    t.has_virial = torch::tensor({0.0, 1.0}, torch::kFloat64);           // only frame 1
    t.weight = torch::tensor({1.0, 3.0}, torch::kFloat64);
    p.energy = torch::tensor({1.4, 1.0}, torch::kFloat64);               // dE/N = 0.2, -1.0
    p.forces = torch::tensor({{0.3, 0.0, 0.0}, {0.0, 0.0, 0.0}, {5.0, 5.0, 5.0}}, torch::kFloat64);
    p.virial = torch::zeros({2, 9}, torch::kFloat64);
    p.virial[1][0] = 0.9;
    p.virial[0][4] = 100.0;  // frame 0 has no virial label: must not count
  }
};

TEST(Loss, EachTermByHand) {
  TinyBatch b;
  MetricSums sums;
  // Energy only: (1 * 0.2^2 + 3 * 1.0^2) / 2
  auto l = loss_terms(b.p, b.t, {1, 0, 0}, "mse", 0, 2.0, &sums).item<double>();
  EXPECT_NEAR(l, (0.04 + 3.0) / 2, 1e-12);
  EXPECT_NEAR(sums.energy_rmse(), std::sqrt((0.04 + 1.0) / 2), 1e-12);
  // Forces only: frame 0 mean over 6 components = 0.09 / 6; frame 1 unlabelled.
  l = loss_terms(b.p, b.t, {0, 1, 0}, "mse", 0, 1.0, nullptr).item<double>();
  EXPECT_NEAR(l, 0.09 / 6, 1e-12);
  EXPECT_NEAR(sums.forces_rmse(), std::sqrt(0.09 / 6), 1e-12);
  // Virial only: frame 1, (0.9 / 1)^2 / 9, weight 3.
  l = loss_terms(b.p, b.t, {0, 0, 1}, "mse", 0, 1.0, nullptr).item<double>();
  EXPECT_NEAR(l, 3 * 0.81 / 9, 1e-12);
  // Huber with delta 0.1: energy residuals 0.2 and 1.0 are in the linear part.
  l = loss_terms(b.p, b.t, {1, 0, 0}, "huber", 0.1, 1.0, nullptr).item<double>();
  auto huber = [](double d, double delta) { return std::abs(d) < delta ? 0.5 * d * d : delta * (std::abs(d) - 0.5 * delta); };
  EXPECT_NEAR(l, huber(0.2, 0.1) + 3 * huber(1.0, 0.1), 1e-12);
}

// Training's sums kept on the device (MetricTotals, read at progress lines and the epoch's end):
// bitwise those of MetricSums added batch by batch on the host after the same start (a resumed
// epoch's), float32 predictions and a normaliser as training has them.
TEST(Loss, TotalsOnTheDeviceEqualSumsOnTheHost) {
  TinyBatch b;
  MetricSums start;
  start.unpack({0.1, 2, 0.3, 12, 0.7, 9, 1.3, 2});
  MetricSums host = start;
  MetricTotals totals(start);
  EXPECT_EQ(totals.read().pack(), start.pack());
  for (const double normalizer : {2.0, 3.0, 7.0}) {
    Prediction p = b.p;
    p.energy = p.energy.to(torch::kFloat32) * (normalizer / 2.0);
    p.forces = p.forces.to(torch::kFloat32) * (normalizer / 3.0);
    p.virial = p.virial.to(torch::kFloat32);
    loss_terms(p, b.t, {0.3, 1.1, 0.7}, "mse", 0, normalizer, &host, &totals);
  }
  EXPECT_EQ(totals.read().pack(), host.pack());
  EXPECT_EQ(totals.read().frames, start.frames + 6);
}

// The metric terms carry no autograd history: the epoch's sums (MetricTotals) would otherwise
// keep every step's graph alive (a training run's memory growing by the model's graph per step).
TEST(Loss, MetricTermsHoldNoAutogradGraph) {
  TinyBatch b;
  b.p.energy.requires_grad_(true);
  b.p.forces.requires_grad_(true);
  torch::Tensor terms;
  const LossWeights w{torch::tensor({1.0, 1.0, 1.0}, torch::kFloat64), torch::scalar_tensor(1.0, torch::kFloat64),
                      torch::scalar_tensor(2.0, torch::kFloat64)};
  const torch::Tensor loss = loss_terms(b.p, b.t, w, "mse", 0, &terms);
  ASSERT_TRUE(loss.requires_grad());
  EXPECT_FALSE(terms.requires_grad());
  EXPECT_FALSE(terms.grad_fn());
}

// A multi-head model's validation per head: the batch with only that head's frames labelled.
TEST(Loss, FramesOfOneHead) {
  TinyBatch b;
  b.t.head = torch::tensor({0, 0, 1}, torch::kInt64);   // frame 0: head 0, frame 1: head 1
  MetricSums h0, h1;
  loss_terms(b.p, frames_of_head(b.t, 0), {1, 1, 1}, "mse", 0, 1.0, &h0);
  loss_terms(b.p, frames_of_head(b.t, 1), {1, 1, 1}, "mse", 0, 1.0, &h1);
  EXPECT_NEAR(h0.energy_rmse(), 0.2, 1e-12);
  EXPECT_NEAR(h0.forces_rmse(), std::sqrt(0.09 / 6), 1e-12);
  EXPECT_TRUE(std::isnan(h0.virial_rmse())) << "frame 0 has no virial";
  EXPECT_NEAR(h1.energy_rmse(), 1.0, 1e-12);
  EXPECT_TRUE(std::isnan(h1.forces_rmse())) << "frame 1 has no forces";
  EXPECT_NEAR(h1.virial_rmse(), std::sqrt(0.81 / 9), 1e-12);
}

TEST(Statistics, EnergyShiftFitRecoversPerSpeciesEnergies) {
  std::vector<Frame> frames;
  const double eh = -13.6, eo = -432.1;
  for (int k = 0; k < 6; ++k) {
    Frame f;
    const int nh = 1 + k % 3, no = 1 + k / 2;
    for (int i = 0; i < nh; ++i) f.structure.numbers.push_back(1);
    for (int i = 0; i < no; ++i) f.structure.numbers.push_back(8);
    f.structure.positions.assign(nh + no, Vec3{});
    f.structure.energy = nh * eh + no * eo;
    frames.push_back(f);
  }
  PackStats stats;
  for (const Frame& f : frames) stats.add(f.structure);
  const auto shift = fit_energy_shift(stats, SpeciesMap({"H", "O"}), 2);
  EXPECT_NEAR(shift[0], eh, 1e-9);
  EXPECT_NEAR(shift[1], eo, 1e-9);
}

// Water-like data: every frame has twice as many H as O, so only 2 E_H + E_O is determined; the
// normal equations' minimum-norm solution is (2, 1) e / 5, not an arbitrary split or a blow-up.
TEST(Statistics, EnergyShiftOfCollinearCountsIsTheMinimumNorm) {
  PackStats stats;
  const double per_molecule = -466.9;
  for (int k = 1; k <= 5; ++k) {
    Structure s;
    for (int i = 0; i < k; ++i) s.numbers.insert(s.numbers.end(), {8, 1, 1});
    for (int i = 0; i < 3 * k; ++i) s.positions.push_back(Vec3{1.5 * i, 0.0, 0.0});
    s.energy = k * per_molecule + 1e-3 * (k % 2);   // a little noise
    stats.add(s);
  }
  const auto shift = fit_energy_shift(stats, SpeciesMap({"H", "O"}), 2);
  EXPECT_NEAR(2 * shift[0] + shift[1], per_molecule, 1e-3);
  EXPECT_NEAR(shift[0] / shift[1], 2.0, 1e-9);
}

TEST(Schedule, ExponentialCosineWarmupAndPrefactors) {
  Config c;
  c.lr = 1e-3;
  c.schedule.type = "exponential";
  c.schedule.final_lr = 1e-5;
  c.energy = {0.02, 1.0};
  c.forces = {1000.0, 1.0};
  const Schedule exp(c, 100);
  EXPECT_DOUBLE_EQ(exp.lr(0), 1e-3);
  EXPECT_NEAR(exp.lr(50), 1e-4, 1e-12);
  EXPECT_NEAR(exp.lr(100), 1e-5, 1e-15);
  EXPECT_NEAR(exp.prefactors(0).forces, 1000.0, 1e-9);
  EXPECT_NEAR(exp.prefactors(100).forces, 1.0 + 999.0 * 1e-2, 1e-9);
  EXPECT_NEAR(exp.prefactors(100).energy, 1.0 - 0.98 * 1e-2, 1e-12);
  c.schedule.type = "cosine";
  c.schedule.warmup_steps = 10;
  const Schedule cos(c, 100);
  EXPECT_NEAR(cos.lr(0), 1e-3 * 0.1 * (1e-5 / 1e-3 + (1 - 1e-5 / 1e-3) * 0.5 * (1 + 1)), 1e-12);
  EXPECT_NEAR(cos.lr(50), 1e-5 + (1e-3 - 1e-5) * 0.5, 1e-12);
}

// Reduce-on-plateau: the rate halves after more than `patience` epochs without a relative
// improvement of `threshold`, never below final_lr, and its state survives a save/restore.
TEST(Schedule, ReduceOnPlateau) {
  Config c;
  c.lr = 1e-3;
  c.schedule.type = "plateau";
  c.schedule.final_lr = 2e-4;
  c.schedule.factor = 0.5;
  c.schedule.patience = 2;
  c.schedule.threshold = 0.01;
  c.energy = {0.02, 1.0};
  Schedule s(c, 100);
  EXPECT_DOUBLE_EQ(s.lr(0), 1e-3);
  EXPECT_FALSE(s.end_epoch(1.0));    // first metric: best
  EXPECT_FALSE(s.end_epoch(0.9));    // improves
  EXPECT_FALSE(s.end_epoch(0.895));  // < 1% better: bad epoch 1
  EXPECT_FALSE(s.end_epoch(0.95));   // bad epoch 2
  EXPECT_DOUBLE_EQ(s.lr(7), 1e-3);
  EXPECT_TRUE(s.end_epoch(0.9));     // bad epoch 3 > patience: halve
  EXPECT_DOUBLE_EQ(s.lr(7), 5e-4);
  EXPECT_NEAR(s.prefactors(7).energy, 1.0 - 0.98 * 0.5, 1e-12);  // prefactors follow lr / lr0
  Schedule resumed(c, 100);
  resumed.restore(nlohmann::json::parse(s.state().dump()));
  for (int k = 0; k < 3; ++k) EXPECT_EQ(resumed.end_epoch(0.91), s.end_epoch(0.91)) << k;
  EXPECT_DOUBLE_EQ(resumed.lr(9), 2.5e-4);
  EXPECT_DOUBLE_EQ(s.lr(9), 2.5e-4);
  for (int k = 0; k < 3; ++k) s.end_epoch(0.91);
  EXPECT_DOUBLE_EQ(s.lr(12), 2e-4);  // 1.25e-4 would be below final_lr: the floor holds
  for (int k = 0; k < 10; ++k) EXPECT_FALSE(s.end_epoch(0.91)) << "no reductions below the floor";
}

// A tiny training problem: 12 ethanol frames from data/, a small se_e2_a, float64.
std::string tiny_config(const TempDir& dir, const std::string& out, int epochs) {
  auto frames = read_extxyz(mlip::testing::source_dir() + "/data/ethanol-rmd17/rmd17_ethanol_1000.xyz",
                            ReadOptions{Units{"angstrom", "kcal/mol", ""}, {}});
  frames.resize(12);
  const std::string data = (dir.path / "frames.xyz").string();
  if (!fs::exists(data)) write_extxyz(data, frames);
  return dir.file("tiny.yaml", R"(model:
  architecture: se_e2_a
  species: [H, C, O]
  cutoff: 4.0
  dtype: float64
  hyperparameters: {embedding: [4, 8], axis_neurons: 2, fitting: [8, 8], rcut_smth: 1.0}
data:
  train: [)" + data + R"(]
  validation_fraction: 0.25
  cache_dir: )" + (dir.path / "cache").string() + R"(
  batch: {frames: 2}
training:
  epochs: )" + std::to_string(epochs) + R"(
  optimizer: {type: adam, lr: 0.003}
  ema_decay: 0.9
output:
  dir: )" + out + R"(
  log_every: 0
)");
}

std::vector<torch::Tensor> checkpoint_parameters(const fs::path& dir) {
  std::vector<torch::Tensor> out;
  for (const auto& p : torch::jit::load((dir / "model.pt").string(), torch::kCPU).named_parameters()) {
    out.push_back(p.value);
  }
  return out;
}

// Fine-tuning (training.init_from): a model trained on the tiny problem, then runs that start from
// its file or its checkpoint folder. Weights of the shared species are carried over exactly; a
// new species gets fresh entries; the descriptor can be frozen; another architecture is refused.
class FineTuning : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // ctest runs each case as its own process, maybe side by side: a folder per process.
    dir_ = new TempDir("mlip_test_fine_tuning_" + std::to_string(getpid()));
    base_ = (dir_->path / "base").string();
    EXPECT_EQ(train_error(tiny_config(*dir_, base_, 2), {}), "no error");
  }
  static void TearDownTestSuite() { delete dir_; }
  static std::string train(const std::string& out, std::vector<std::string> overrides) {
    overrides.push_back("output.dir=" + out);
    return train_error(tiny_config(*dir_, out, 1), overrides);
  }
  static inline TempDir* dir_ = nullptr;
  static inline std::string base_;
};

TEST_F(FineTuning, StartsFromTheModelFileAndAddsASpecies) {
  const std::string out = (dir_->path / "added").string();
  // lr 1e-200: the one epoch cannot move a weight, so the run's model shows what it started from.
  ASSERT_EQ(train(out, {"training.init_from=" + base_ + "/model.pt", "model.species=[H, C, O, N]",
                        "training.optimizer.lr=1e-200"}),
            "no error");
  const auto source = read_model_weights(base_ + "/model.pt");
  const auto tuned = read_model_weights(out + "/model.pt");
  ASSERT_FALSE(source.empty());
  for (const auto& [name, t] : source) {
    if (name == "energy_shift" || name == "inv_neighbor_norm") continue;
    ASSERT_TRUE(tuned.count(name)) << name;
    // H, C, O are entries 0-2 of both models (one embedding net per neighbour species).
    EXPECT_TRUE(torch::equal(tuned.at(name).narrow(0, 0, 3), t)) << name;
    EXPECT_EQ(tuned.at(name).size(0), 4) << name << ": an entry for N";
  }
  EXPECT_TRUE(torch::equal(tuned.at("inv_neighbor_norm"), source.at("inv_neighbor_norm")));
  EXPECT_FALSE(torch::equal(tuned.at("fit_w0")[3], torch::zeros_like(tuned.at("fit_w0")[3])));
  // The shift moves by a least-squares fit of the residuals on the same data: a small change.
  const auto shift = tuned.at("energy_shift").narrow(0, 0, 3) - source.at("energy_shift");
  EXPECT_LT(shift.abs().max().item<double>(), 1.0);
}

TEST_F(FineTuning, FreezeKeepsTheDescriptorOfACheckpoint) {
  const std::string out = (dir_->path / "frozen").string();
  ASSERT_EQ(train(out, {"training.init_from=" + base_ + "/checkpoints/best", "training.freeze=descriptor"}),
            "no error");
  const auto source = named_weights(read_checkpoint(base_ + "/checkpoints/best").module);
  const auto tuned = read_model_weights(out + "/model.pt");
  for (const char* name : {"emb_w0", "emb_b0", "emb_w1", "emb_b1"})
    EXPECT_TRUE(torch::equal(tuned.at(name), source.at(name))) << name;
  EXPECT_FALSE(torch::equal(tuned.at("fit_w0"), source.at("fit_w0"))) << "the fitting net is trained";
}

TEST_F(FineTuning, AnotherArchitectureOrCutoffIsRefusedListingWhatDiffers) {
  const std::string e = train((dir_->path / "other").string(),
                              {"training.init_from=" + base_ + "/model.pt", "model.cutoff=3.5",
                               "model.hyperparameters.embedding=[8, 8]"});
  EXPECT_NE(e.find("is not the model this config describes"), std::string::npos) << e;
  EXPECT_NE(e.find("model.cutoff: 3.5 (source 4)"), std::string::npos) << e;
  EXPECT_NE(e.find("model.hyperparameters.embedding: [8,8] (source [4,8])"), std::string::npos) << e;
  const std::string a = train((dir_->path / "painn").string(), {"training.init_from=" + base_ + "/model.pt",
                                                                 "model.architecture=painn", "model.hyperparameters={}"});
  EXPECT_NE(a.find("model.architecture: painn (source se_e2_a)"), std::string::npos) << a;
  const std::string f = train((dir_->path / "nofrom").string(), {"training.freeze=descriptor"});
  EXPECT_NE(f.find("training.freeze needs training.init_from"), std::string::npos) << f;
}

// The energy shift re-fitted at each validation (training.refit_frames): the exported model, its
// EMA weights with the shift re-fitted to them, leaves no mean energy error per atom on the frames
// of the re-fit (the least-squares condition; here all 12, which train and validate), where the
// shift fitted to the data at the start and kept (refit_energy_shift: false) leaves one.
TEST(Training, EnergyShiftRefitLeavesNoMeanErrorOnItsFrames) {
  TempDir dir("mlip_test_shift_refit_" + std::to_string(getpid()));
  const std::string config = tiny_config(dir, (dir.path / "unused").string(), 2);
  const std::string data = (dir.path / "frames.xyz").string();
  const std::vector<Structure> frames = read_extxyz(data, ReadOptions{});
  auto mean_error = [&](const std::string& refit) {
    const std::string out = (dir.path / refit).string();
    EXPECT_EQ(train_error(config, {"data.validation=[" + data + "]", "training.refit_frames=100",
                                   "training.refit_energy_shift=" + refit, "output.dir=" + out}),
              "no error");
    const Model model = Model::load(out + "/model.pt");
    double sum = 0;
    for (const Structure& s : frames)
      sum += (mlip::testing::evaluate_reference(model, s).energy - *s.energy) / static_cast<double>(s.size());
    return sum / static_cast<double>(frames.size());
  };
  const double kept = mean_error("false"), refitted = mean_error("true");
  EXPECT_GT(std::abs(kept), 1e-5) << "eV/atom: the shift kept leaves a mean error (else this test shows nothing)";
  EXPECT_LT(std::abs(refitted), 1e-9) << "eV/atom";
}

// A run whose loss stops being finite (here: a learning rate of 1e300 sends the weights to
// infinity at the first step) ends with an error that says so, and writes nothing of that epoch:
// the epoch before it stays the newest checkpoint and best/, with finite weights to resume from.
TEST(Training, ADivergedRunStopsAndKeepsItsCheckpoints) {
  TempDir dir("mlip_test_diverged_" + std::to_string(getpid()));
  const std::string out = (dir.path / "run").string();
  const std::string config = tiny_config(dir, out, 1);
  ASSERT_EQ(train_error(config, {}), "no error");
  const std::string error = train_error(config, {"training.epochs=3", "training.optimizer.lr=1e300"}, /*resume=*/true);
  EXPECT_NE(error.find("epoch 2, step "), std::string::npos) << error;
  EXPECT_NE(error.find(" loss is "), std::string::npos) << error;
  EXPECT_NE(error.find("(the training diverged); nothing after the last checkpoint was saved"), std::string::npos) << error;
  const fs::path checkpoints = fs::path(out) / "checkpoints";
  std::vector<std::string> epochs;
  for (const auto& e : fs::directory_iterator(checkpoints))
    if (e.path().filename().string().rfind("epoch-", 0) == 0) epochs.push_back(e.path().filename().string());
  EXPECT_EQ(epochs, std::vector<std::string>{"epoch-000001"});
  for (const fs::path& d : {checkpoints / "epoch-000001", checkpoints / "best"})
    for (const torch::Tensor& p : checkpoint_parameters(d)) EXPECT_TRUE(torch::isfinite(p).all().item<bool>()) << d;
  // A checkpoint after every step: AdamW's decay (weights times 1 - lr x decay, here -inf) sends the
  // weights to infinity at the first update, while the loss of that step, made before it, is
  // finite; the weights' own check keeps that step's checkpoint from being written.
  const fs::path each_step = dir.path / "each_step";
  const std::string each = train_error(config, {"training.optimizer={type: adamw, lr: 1e300, weight_decay: 1e10}",
                                                "output.checkpoint_every_steps=1", "output.dir=" + each_step.string()});
  EXPECT_NE(each.find("epoch 1, step 1: the model's weights are no longer finite"), std::string::npos) << each;
  EXPECT_TRUE(!fs::exists(each_step / "checkpoints") || fs::is_empty(each_step / "checkpoints")) << "a checkpoint was written";
}

// Multi-head fine-tuning (mace-torch's --multiheads_finetuning): a single-head MACE model, then a
// run with two heads, each data source naming its head (the new data and the replay data of the
// source's head). Every head starts from the source's readout and energy buffers; the batches mix
// the heads; a source naming a head the model lacks is an error naming the key.
TEST(MultiHeadFineTuning, KeepsTheSourceInEveryHeadAndTrainsEachOnItsData) {
  TempDir dir("mlip_test_multi_head_" + std::to_string(getpid()));
  const std::string base = (dir.path / "base").string(), tuned = (dir.path / "tuned").string();
  const std::string config = tiny_config(dir, base, 1);
  const std::vector<std::string> mace = {
      "model.architecture=mace", "model.cutoff=3.0",
      "model.hyperparameters={num_channels: 4, max_L: 1, max_ell: 2, correlation: 2, radial_MLP: [8], "
      "MLP_irreps: 4x0e, avg_num_neighbors: 5.0}"};
  std::vector<std::string> first = mace;
  first.push_back("output.dir=" + base);
  ASSERT_EQ(train_error(config, first), "no error");
  const std::string frames = (dir.path / "frames.xyz").string();
  std::vector<std::string> second = mace;
  second.back().pop_back();
  second.back() += ", heads: [new, pt], head: new}";
  for (const std::string& o : std::vector<std::string>{
           "data.train=[{path: " + frames + ", head: new}, {path: " + frames + ", head: pt, weight: 0.5}]",
        "training.init_from=" + base + "/model.pt", "training.optimizer.lr=1e-200", "training.refit_energy_shift=false",
        "output.dir=" + tuned})
    second.push_back(o);
  ::testing::internal::CaptureStdout();
  const std::string outcome = train_error(config, second);
  const std::string printed = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(outcome, "no error") << printed;
  EXPECT_NE(printed.find("val by head (meV/atom, meV/A, meV/atom): new: E "), std::string::npos) << printed;
  EXPECT_NE(printed.find(" | pt: E "), std::string::npos) << printed;
  const auto source = read_model_weights(base + "/model.pt");
  const auto heads = read_model_weights(tuned + "/model.pt");
  for (const char* name : {"l0_ro_w", "l1_ro1_w", "l1_ro2_w"})
    for (int64_t h = 0; h < 2; ++h) EXPECT_TRUE(torch::equal(heads.at(name)[h], source.at(name))) << name << " head " << h;
  for (const char* name : {"energy_shift", "energy_scale"})
    for (int64_t h = 0; h < 2; ++h)
      EXPECT_TRUE(torch::equal(heads.at(name).select(1, h), source.at(name))) << name << " head " << h;
  EXPECT_TRUE(torch::equal(heads.at("l1_prod_w"), source.at("l1_prod_w"))) << "the shared layers";
  // The energy shift re-fitted per head on its own training frames (each head's share of the split),
  // and at the validation on refit_frames of each head's.
  std::vector<std::string> refit = second;
  refit.push_back("training.refit_energy_shift=true");
  refit.push_back("training.refit_frames=2");
  refit.push_back("output.dir=" + (dir.path / "refit").string());
  ::testing::internal::CaptureStdout();
  const std::string refitted = train_error(config, refit);
  const std::string refit_log = ::testing::internal::GetCapturedStdout();
  ASSERT_EQ(refitted, "no error") << refit_log;
  EXPECT_NE(refit_log.find("energy shift re-fitted before this validation, on 4 training frames (eV): new: "),
            std::string::npos) << refit_log;
  const torch::Tensor shift = read_model_weights((dir.path / "refit" / "model.pt").string()).at("energy_shift");
  for (int64_t h = 0; h < 2; ++h) {
    const torch::Tensor delta = shift.select(1, h) - source.at("energy_shift");
    EXPECT_GT(delta.abs().max().item<double>(), 0.0) << "head " << h;
    EXPECT_LT(delta.abs().max().item<double>(), 1.0) << "head " << h;
  }
  // A head the model lacks, and a head named for a model without heads.
  std::vector<std::string> unknown = second;
  unknown.push_back("data.train=[{path: " + frames + ", head: old}]");
  EXPECT_NE(train_error(config, unknown).find("data.train[0].head: 'old' is not one of the model's heads (new, pt)"),
            std::string::npos)
      << train_error(config, unknown);
  std::vector<std::string> none = first;
  none.push_back("data.train=[{path: " + frames + ", head: new}]");
  EXPECT_NE(train_error(config, none).find("data.train[0].head: 'new', but the model has no heads"), std::string::npos)
      << train_error(config, none);
  // A multi-head model trained from scratch: each head's energy shift fitted to its own frames.
  std::vector<std::string> fresh = second;
  fresh.erase(std::find_if(fresh.begin(), fresh.end(), [](const std::string& o) { return o.rfind("training.init_from", 0) == 0; }));
  fresh.push_back("output.dir=" + (dir.path / "fresh").string());
  ASSERT_EQ(train_error(config, fresh), "no error");
  const torch::Tensor fresh_shift = read_model_weights((dir.path / "fresh" / "model.pt").string()).at("energy_shift");
  EXPECT_FALSE(torch::equal(fresh_shift.select(1, 0), fresh_shift.select(1, 1)));
  // mlip-trainer test --head: a head the model lacks is named with the model's.
  TestOptions other;
  other.head = "old";
  try {
    test_model(tuned + "/model.pt", frames, "auto", Units{}, other, [](const std::string&) {});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("head old is not one of the model's heads (new, pt)"), std::string::npos) << e.what();
  }
  other.head = "pt";
  EXPECT_GT(test_model(tuned + "/model.pt", frames, "auto", Units{}, other, [](const std::string&) {}).frames, 0);
  // Fine-tuning the two-head model into one without heads must say which to keep.
  std::vector<std::string> flat = first;
  flat.push_back("training.init_from=" + tuned + "/model.pt");
  flat.push_back("output.dir=" + (dir.path / "flat").string());
  EXPECT_NE(train_error(config, flat).find("the source model has the heads new, pt: list those to keep"), std::string::npos)
      << train_error(config, flat);
}

TEST(Checkpoint, InterruptedAndResumedEqualsUninterrupted) {
  TempDir dir("mlip_test_resume");
  SerialCommunicator comm;
  const std::string full_out = (dir.path / "full").string(), split_out = (dir.path / "split").string();
  Trainer full(read_config(tiny_config(dir, full_out, 3)), "", comm);
  full.run(false);

  const std::string split_cfg = tiny_config(dir, split_out, 3);
  Trainer first(read_config(split_cfg), "", comm);
  first.run(false, /*stop_after_epochs=*/2);
  // A second run into the same folder without --resume must refuse, writing nothing.
  Trainer again(read_config(split_cfg), "", comm);
  EXPECT_THROW(again.run(false), Error);
  Trainer resumed(read_config(split_cfg), "", comm);
  resumed.run(true);

  EXPECT_EQ(resumed.state().step, full.state().step);
  const auto a = checkpoint_parameters(fs::path(full_out) / "checkpoints" / "epoch-000003");
  const auto b = checkpoint_parameters(fs::path(split_out) / "checkpoints" / "epoch-000003");
  ASSERT_EQ(a.size(), b.size());
  ASSERT_FALSE(a.empty());
  for (std::size_t i = 0; i < a.size(); ++i) {
    // Bitwise: same data order, same optimiser and EMA state, same reductions.
    EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
  }
  EXPECT_TRUE(fs::exists(fs::path(full_out) / "model.pt"));
  EXPECT_TRUE(fs::exists(fs::path(full_out) / "metrics.csv"));
  EXPECT_TRUE(fs::exists(fs::path(full_out) / "checkpoints" / "best" / "state.json"));
}

// The device path of the trainer, run on the CPU: per-frame tensors kept "on the device" and
// concatenated into batches there (training.data_on_device, the default on GPUs) train bitwise
// the same as batches built on the host; so do gradient buckets of any size.
TEST(Training, DataKeptOnTheDeviceAndBucketsGiveBitwiseTheSameRun) {
  TempDir dir("mlip_test_device_path");
  SerialCommunicator comm;
  auto train = [&](const std::string& name, const std::vector<std::string>& overrides) {
    const std::string out = (dir.path / name).string();
    std::vector<std::string> all = overrides;
    all.push_back("training.device=cpu");
    Trainer t(read_config(tiny_config(dir, out, 2), all), "", comm);
    t.run(false);
    EXPECT_TRUE(t.device().is_cpu());
    return checkpoint_parameters(fs::path(out) / "checkpoints" / "epoch-000002");
  };
  const auto host = train("host", {"training.data_on_device=false"});
  const auto resident = train("resident", {"training.data_on_device=true"});
  const auto buckets = train("buckets", {"training.data_on_device=true", "communication.bucket_mb=0.0001"});
  ASSERT_FALSE(host.empty());
  ASSERT_EQ(host.size(), resident.size());
  for (std::size_t i = 0; i < host.size(); ++i) {
    EXPECT_TRUE(torch::equal(host[i], resident[i])) << "parameter " << i;
    EXPECT_TRUE(torch::equal(host[i], buckets[i])) << "parameter " << i;
  }
}

// concat() of per-frame batches is the batch make_batch() builds from the same frames.
TEST(Training, ConcatenatedFramesEqualOneBatch) {
  auto frames_xyz = read_extxyz(mlip::testing::source_dir() + "/data/ethanol-rmd17/rmd17_ethanol_1000.xyz",
                                ReadOptions{Units{"angstrom", "kcal/mol", ""}, {}});
  std::vector<Frame> frames;
  for (int k = 0; k < 3; ++k) frames.push_back(make_frame(frames_xyz[k], 4.0));
  frames[1].structure.virial = Mat3{{{1, 0, 0}, {0, 2, 0}, {0, 0, 3}}};
  const SpeciesMap species({"H", "C", "O"});
  const BatchTensors whole = to_tensors(make_batch({&frames[0], &frames[1], &frames[2]}, species), torch::kFloat64);
  std::vector<BatchTensors> one;
  for (const Frame& f : frames) one.push_back(to_device(to_tensors(make_batch({&f}, species), torch::kFloat64), torch::kCPU));
  const BatchTensors joined = concat({&one[0], &one[1], &one[2]});
  EXPECT_EQ(joined.n_atoms, whole.n_atoms);
  EXPECT_EQ(joined.n_frames, whole.n_frames);
  EXPECT_EQ(joined.any_virial, whole.any_virial);
  for (auto member : {&BatchTensors::species, &BatchTensors::edge_index, &BatchTensors::edge_vectors,
                      &BatchTensors::frame_of_atom, &BatchTensors::frame_of_edge, &BatchTensors::atoms_per_frame,
                      &BatchTensors::energy, &BatchTensors::has_energy, &BatchTensors::forces,
                      &BatchTensors::has_forces_atom, &BatchTensors::virial, &BatchTensors::has_virial,
                      &BatchTensors::weight}) {
    EXPECT_TRUE(torch::equal(joined.*member, whole.*member));
  }
}

// training.data_on_device: auto keeps the frames on a GPU when they take at most half of its free
// memory, never copies a streamed set whole when the free memory is unknown, and builds batches on
// the host on the CPU; true is an error that names both sizes when the frames do not fit.
TEST(Training, DataKeptOnTheDeviceOnlyWhenItFits) {
  const std::optional<int64_t> gib40 = int64_t(40) << 30, unknown;
  const int64_t gib10 = int64_t(10) << 30, gib30 = int64_t(30) << 30;
  EXPECT_TRUE(choose_data_residency("auto", "c.yaml", true, false, gib10, gib40).on_device);
  EXPECT_TRUE(choose_data_residency("auto", "c.yaml", true, true, gib10, gib40).on_device);   // a pack that fits
  const DataResidency big = choose_data_residency("auto", "c.yaml", true, true, gib30, gib40);
  EXPECT_FALSE(big.on_device);
  EXPECT_NE(big.why.find("more than half of the GPU's 40.00 GiB free"), std::string::npos) << big.why;
  EXPECT_FALSE(choose_data_residency("auto", "c.yaml", true, true, gib10, unknown).on_device);
  EXPECT_TRUE(choose_data_residency("auto", "c.yaml", true, false, gib10, unknown).on_device);
  EXPECT_FALSE(choose_data_residency("auto", "c.yaml", false, false, 0, unknown).on_device);
  EXPECT_FALSE(choose_data_residency("false", "c.yaml", true, false, gib10, gib40).on_device);
  EXPECT_TRUE(choose_data_residency("true", "c.yaml", true, true, gib30, gib40).on_device);
  EXPECT_TRUE(choose_data_residency("true", "c.yaml", false, true, gib30, unknown).on_device);
  try {
    choose_data_residency("true", "c.yaml", true, false, int64_t(50) << 30, gib40);
    ADD_FAILURE() << "no error";
  } catch (const mlip::Error& e) {
    EXPECT_NE(std::string(e.what()).find("c.yaml: training.data_on_device true: the training and validation frames "
                                         "take about 50.00 GiB on the device, more than its 40.00 GiB free"),
              std::string::npos)
        << e.what();
  }
}

// The estimate of the frames' bytes on a device: exact for frames all alike (a sample of 64 of
// 200 scaled by the atoms), and the bytes of the tensors a batch of one frame holds.
TEST(Training, ResidentBytesScaleWithTheFrames) {
  auto xyz = read_extxyz(mlip::testing::source_dir() + "/data/ethanol-rmd17/rmd17_ethanol_1000.xyz",
                         ReadOptions{Units{"angstrom", "kcal/mol", ""}, {}});
  const SpeciesMap species({"H", "C", "O"});
  std::vector<Frame> one_frame = {make_frame(xyz[0], 4.0)};
  const BatchTensors b = to_tensors(make_batch({&one_frame[0]}, species), torch::kFloat64);
  int64_t bytes = 0;
  for (const torch::Tensor* t : {&b.species, &b.edge_index, &b.edge_vectors, &b.frame_of_atom, &b.frame_of_edge,
                                 &b.atoms_per_frame, &b.energy, &b.has_energy, &b.forces, &b.has_forces_atom,
                                 &b.virial, &b.has_virial, &b.weight})
    bytes += (t->numel() * static_cast<int64_t>(t->element_size()) + 511) / 512 * 512;
  EXPECT_EQ(resident_bytes(*memory_source(one_frame), species, torch::kFloat64), bytes);
  const std::vector<Frame> many(200, one_frame[0]);
  EXPECT_EQ(resident_bytes(*memory_source(many), species, torch::kFloat64), 200 * bytes);
}

// Device and communication settings: bad values name the file and key; a GPU asked for where
// there is none, or NCCL without a GPU, is a clear error before any training.
TEST(Training, DeviceAndCommunicationErrors) {
  TempDir dir("mlip_test_device_errors");
  const std::string cfg = tiny_config(dir, (dir.path / "run").string(), 1);
  auto run_error = [&](const std::vector<std::string>& overrides) { return train_error(cfg, overrides); };
  EXPECT_NE(error_of(cfg, {"communication.backend=gloo"}).find("communication.backend must be auto, mpi or nccl"),
            std::string::npos);
  EXPECT_NE(error_of(cfg, {"communication.bucket_mb=0"}).find("bucket_mb must be > 0"), std::string::npos);
  EXPECT_NE(error_of(cfg, {"communication.timeout=-1"}).find("communication.timeout must be >= 0 seconds"),
            std::string::npos);
  EXPECT_NE(error_of(cfg, {"training.data_on_device=maybe"}).find("training.data_on_device must be"), std::string::npos);
  EXPECT_NE(error_of(cfg, {"training.accumulate_dtype=float16"}).find("accumulate_dtype must be"), std::string::npos);
  EXPECT_NE(error_of(cfg, {"training.device=gpu"}).find("training.device must be auto, cpu, cuda or cuda:N, not 'gpu'"),
            std::string::npos);
  EXPECT_NE(error_of(cfg, {"training.device=cuda:x"}).find("training.device must be"), std::string::npos);
  const std::string nccl = run_error({"training.device=cpu", "communication.backend=nccl"});
  EXPECT_NE(nccl.find("communication.backend nccl needs a GPU"), std::string::npos) << nccl;
  if (cuda_device_count() > 0) return;
  const std::string cuda = run_error({"training.device=cuda"});
  EXPECT_NE(cuda.find("training.device: device 'cuda' asked for, but no GPU can be used"), std::string::npos) << cuda;
  EXPECT_FALSE(fs::exists(dir.path / "run" / "checkpoints")) << "nothing written";
}

// Whether NCCL can be used: every rank on a GPU of its own, told apart by node and PCI bus (a
// launcher may show each rank one GPU, all as cuda:0), agreed by a sum over all ranks. Rank 0 of
// three, the other ranks' identities given.
TEST(Communication, GpuSharingToldApartByNodeAndBus) {
  // Rank `me` of three; its sum adds `others`, the slots the other ranks put in.
  struct Rank final : Communicator {
    int me = 0;
    std::vector<double> others = std::vector<double>(3, 0.0), put;
    int rank() const override { return me; }
    int size() const override { return 3; }
    std::string name() const override { return "test"; }
    void allreduce_sum(torch::Tensor&) override {}
    void allreduce_sum(double* data, std::size_t n) override {
      put.assign(data, data + n);
      for (std::size_t k = 0; k < n; ++k) data[k] += others[k];
    }
    void allreduce_sum(float*, std::size_t) override {}
    void broadcast(std::string&) override {}
    void barrier() override {}
  };
  auto sharing = [](const std::string& mine, const std::vector<std::string>& others) {
    Rank zero;
    for (int r = 1; r < 3; ++r) {   // what rank r puts in
      Rank other;
      other.me = r;
      gpu_sharing(other, others[static_cast<std::size_t>(r - 1)]);
      for (std::size_t k = 0; k < 3; ++k) zero.others[k] += other.put[k];
    }
    return gpu_sharing(zero, mine);
  };
  // one GPU each, each rank shown its own as cuda:0: NCCL
  GpuSharing s = sharing("node1/0000:1A:00.0", {"node1/0000:1B:00.0", "node2/0000:1A:00.0"});
  EXPECT_EQ(s.on_gpu, 3);
  EXPECT_TRUE(s.every_rank_its_own(3));
  EXPECT_EQ(s.with_mine, 1);
  // two ranks on one GPU of a node (each counts on half its memory: data_on_device)
  s = sharing("node1/0000:1A:00.0", {"node1/0000:1A:00.0", "node2/0000:1A:00.0"});
  EXPECT_EQ(s.on_gpu, 3);
  EXPECT_FALSE(s.every_rank_its_own(3));
  EXPECT_EQ(s.with_mine, 2);
  s = sharing("node1/0000:1A:00.0", {"node1/0000:1A:00.0", "node1/0000:1A:00.0"});
  EXPECT_EQ(s.with_mine, 3);
  // a rank on the CPU; all on the CPU
  s = sharing("node1/0000:1A:00.0", {"", "node2/0000:1A:00.0"});
  EXPECT_EQ(s.on_gpu, 2);
  EXPECT_FALSE(s.every_rank_its_own(3));
  EXPECT_EQ(s.with_mine, 1);
  s = sharing("", {"", ""});
  EXPECT_EQ(s.on_gpu, 0);
  EXPECT_FALSE(s.every_rank_its_own(3));
  EXPECT_EQ(s.with_mine, 1);
  // the identity names the device (its PCI bus, or the device where that cannot be read): one
  // node's two GPUs differ, the same GPU asked twice does not
  EXPECT_NE(gpu_identity(torch::Device("cuda:0")), gpu_identity(torch::Device("cuda:1")));
  EXPECT_EQ(gpu_identity(torch::Device("cuda:1")), gpu_identity(torch::Device("cuda:1")));
}

// A recorded training step on several ranks records their all-reduces: NCCL 2.9.6 or later
// (NCCL's version codes changed scheme at 2.9), never a host backend.
TEST(Communication, RecordedAllReducesNeedNccl296) {
  EXPECT_EQ(nccl_unrecordable(20906), "");
  EXPECT_EQ(nccl_unrecordable(22805), "");
  EXPECT_EQ(nccl_unrecordable(30000), "");
  EXPECT_EQ(nccl_unrecordable(20905), "the NCCL loaded is 2.9.5");
  EXPECT_EQ(nccl_unrecordable(2804), "the NCCL loaded is 2.8.4");
  EXPECT_EQ(nccl_unrecordable(2708), "the NCCL loaded is 2.7.8");
  const SerialCommunicator serial;
  EXPECT_EQ(serial.unrecordable(), "these ranks sum over serial, through the host");
}

// --threads' default: each rank's share of the CPUs its affinity has, each CPU divided among the
// node's ranks that may run on it (mlip::fair_threads); the warning where threads outnumber them.
TEST(Communication, DefaultThreadsAreARanksShareOfItsCores) {
  const auto on = [](std::vector<int> cpus, int cores) { return CpuAffinity{std::move(cpus), cores}; };
  EXPECT_EQ(fair_threads(on({0}, 1), {1, 1}), 1);                              // bound to a core each
  EXPECT_EQ(fair_threads(on({4, 5, 6, 7}, 4), std::vector<int>(8, 1)), 4);      // --map-by slot:PE=4
  EXPECT_EQ(fair_threads(on({0, 1, 2, 3}, 4), std::vector<int>(4, 2)), 2);      // 2 unbound ranks, 4 cores
  EXPECT_EQ(fair_threads(on({0, 1}, 2), {3, 3}), 1);                            // more ranks than cores: 1
  std::vector<int> cpuset(64, 0);                                                // a container's 4 of 64
  for (int c = 8; c < 12; ++c) cpuset[static_cast<std::size_t>(c)] = 2;          // CPUs, 2 unbound ranks
  EXPECT_EQ(fair_threads(on({8, 9, 10, 11}, 4), cpuset), 2);
  EXPECT_EQ(fair_threads(on({0, 1, 2}, 3), {}), 3);                             // one process: its CPUs
  EXPECT_EQ(fair_threads(on({0, 64}, 1), std::vector<int>(128, 1)), 1);         // a core's 2 hyperthreads
  EXPECT_EQ(fair_threads(on({0, 1, 2, 3}, 2), std::vector<int>(4, 2)), 1);      // 2 ranks, 2 cores x 2
  const CpuAffinity here = cpu_affinity();
  if (here.cpus.empty()) GTEST_SKIP() << "the CPU affinity is unknown here (or OpenMP binds threads itself)";
  ASSERT_GE(here.cores, 1);
  ASSERT_LE(here.cores, static_cast<int>(here.cpus.size()));
  EXPECT_EQ(default_threads(SerialCommunicator{}), here.cores);
  EXPECT_EQ(threads_beyond_cores(here.cores), "");
  const std::string note = threads_beyond_cores(here.cores + 1);
  EXPECT_NE(note.find(std::to_string(here.cores + 1) + " LibTorch threads, but this process may run on " +
                      std::to_string(here.cores) + " core(s)"),
            std::string::npos)
      << note;
}

// The collectives' watchdog (NCCL's, with CUDA events as the work): it fails once, with the
// reason, when the health check reports an error, when the oldest unfinished work is overdue, or
// when its poller is stuck in a call; finished work never times out and is dropped by the
// poller; work queued behind other work is timed from when that finished; it keeps at most
// kMostPending, the oldest's clock kept; it stops promptly.
TEST(Communication, WatchdogEndsAHangingOrFailedCollective) {
  using namespace std::chrono_literals;
  struct Seen {
    std::mutex m;
    std::vector<std::string> failures;
    CollectiveWatchdog::Fail record() {
      return [this](const std::string& why) { const std::lock_guard<std::mutex> l(m); failures.push_back(why); };
    }
    std::size_t count() { const std::lock_guard<std::mutex> l(m); return failures.size(); }
    std::string first() { const std::lock_guard<std::mutex> l(m); return failures.at(0); }
  };
  auto eventually = [](const std::function<bool()>& ready) {   // within 5 s (a loaded machine)
    for (int k = 0; k < 1000 && !ready(); ++k) std::this_thread::sleep_for(5ms);
    return ready();
  };
  auto healthy = [] { return std::string(); };
  {  // finished work and a healthy communicator: dropped by the poller, no failure
    Seen seen;
    CollectiveWatchdog dog(healthy, seen.record(), 2s, 5ms);
    for (int k = 0; k < 100; ++k) dog.watch("an all-reduce", [] { return true; });
    EXPECT_TRUE(eventually([&] { return dog.pending() == 0; }));
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(seen.count(), 0u);
  }
  {  // work that never finishes: one failure naming the oldest and the timeout; at most
     // kMostPending kept, the oldest's clock with them
    Seen seen;
    CollectiveWatchdog dog(healthy, seen.record(), 100ms, 5ms);
    dog.watch("an all-reduce of gradients", [] { return false; });
    for (int k = 0; k < 300; ++k) dog.watch("a later all-reduce", [] { return false; });
    EXPECT_EQ(dog.pending(), CollectiveWatchdog::kMostPending);
    ASSERT_TRUE(eventually([&] { return seen.count() == 1; }));
    EXPECT_NE(seen.first().find("an all-reduce of gradients has not finished"), std::string::npos) << seen.first();
    EXPECT_NE(seen.first().find("communication.timeout"), std::string::npos);
  }
  {  // work that finishes well before its timeout; no limit (0) never fails
    Seen seen;
    std::atomic<bool> finished{false};
    CollectiveWatchdog dog(healthy, seen.record(), 2s, 5ms);
    dog.watch("an all-reduce", [&] { return finished.load(); });
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(dog.pending(), 1u);
    finished = true;
    EXPECT_TRUE(eventually([&] { return dog.pending() == 0; }));
    CollectiveWatchdog unlimited(healthy, seen.record(), 0ms, 5ms);
    unlimited.watch("an all-reduce", [] { return false; });
    std::this_thread::sleep_for(50ms);
    EXPECT_EQ(unlimited.pending(), 1u);
    EXPECT_EQ(seen.count(), 0u);
  }
  {  // work queued behind other work (a host that ran steps ahead of its GPU): its clock starts
     // when the work before it is seen finished, not when it was watched
    Seen seen;
    std::atomic<bool> first{false}, second{false};
    CollectiveWatchdog dog(healthy, seen.record(), 1000ms, 5ms);
    dog.watch("step 1's all-reduces", [&] { return first.load(); });
    dog.watch("step 2's all-reduces", [&] { return second.load(); });
    std::this_thread::sleep_for(800ms);
    first = true;
    std::this_thread::sleep_for(800ms);   // 1.6 s after it was watched, 0.8 s after the first finished
    second = true;
    EXPECT_TRUE(eventually([&] { return dog.pending() == 0; }));
    EXPECT_EQ(seen.count(), 0u) << (seen.count() ? seen.first() : "");
  }
  {  // an asynchronous error: reported with its reason
    Seen seen;
    std::atomic<bool> broken{false};
    CollectiveWatchdog dog([&] { return broken ? std::string("NCCL reported an error: remote process exited") : std::string(); },
                           seen.record(), 0ms, 5ms);
    std::this_thread::sleep_for(20ms);
    EXPECT_EQ(seen.count(), 0u);
    broken = true;
    ASSERT_TRUE(eventually([&] { return seen.count() == 1; }));
    EXPECT_EQ(seen.first(), "NCCL reported an error: remote process exited");
  }
  {  // the poller stuck in a call (a wedged GPU): the monitor, which makes none, reports it
    Seen seen;
    std::atomic<bool> stuck{true};
    CollectiveWatchdog dog([&] { while (stuck) std::this_thread::sleep_for(1ms); return std::string(); },
                           seen.record(), 100ms, 5ms);
    ASSERT_TRUE(eventually([&] { return seen.count() == 1; }));
    EXPECT_NE(seen.first().find("have not returned"), std::string::npos) << seen.first();
    stuck = false;
  }
  // stopping is prompt although the threads look only every 10 s
  const auto t0 = std::chrono::steady_clock::now();
  { CollectiveWatchdog slow(healthy, [](const std::string&) {}, 0ms, 10s); }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
}

// Gradient buckets: every parameter in exactly one bucket, last parameters first, no bucket over
// the size unless one parameter is larger; each bucket summed in one call.
TEST(GradientReducer, BucketsCoverEveryParameterOnceInReverseOrder) {
  struct Doubling final : Communicator {  // two ranks with identical gradients
    std::vector<int64_t> calls;
    int rank() const override { return 0; }
    int size() const override { return 2; }
    std::string name() const override { return "test"; }
    void allreduce_sum(torch::Tensor& t) override {
      calls.push_back(t.numel());
      t.mul_(2.0);
    }
    void allreduce_sum(double*, std::size_t) override {}
    void allreduce_sum(float*, std::size_t) override {}
    void broadcast(std::string&) override {}
    void barrier() override {}
  };
  std::vector<torch::Tensor> params;
  for (int64_t n : {10, 300, 20, 30, 5}) params.push_back(torch::randn({n}, torch::kFloat64).requires_grad_(true));
  for (auto& p : params) p.mutable_grad() = torch::randn_like(p);
  params[2].mutable_grad() = torch::Tensor();  // no gradient: zeros
  std::vector<torch::Tensor> before;
  for (auto& p : params) before.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  GradientReducer reducer(params, 40 * sizeof(double));
  EXPECT_EQ(reducer.buckets(), 4u);  // {5, 30}, {20}, {300}, {10}
  Doubling comm;
  reducer.reduce(comm);
  EXPECT_EQ(comm.calls, (std::vector<int64_t>{35, 20, 300, 10}));
  for (std::size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i].grad(), 2 * before[i])) << i;
  double norm = 0;
  for (auto& p : params) norm += p.grad().pow(2).sum().item<double>();
  EXPECT_NEAR(reducer.gradient_norm(), std::sqrt(norm), 1e-12 * std::sqrt(norm));
}

// training.grad_clip: gradients whose global norm is above the clip are scaled onto it (float32
// and float64, as a host scalar would scale them); at or below it they stay bitwise as they were.
TEST(GradientReducer, ClipNormScalesOntoTheClipAndLeavesSmallerNormsAlone) {
  for (const auto dtype : {torch::kFloat32, torch::kFloat64}) {
    torch::manual_seed(5);
    std::vector<torch::Tensor> params;
    for (int64_t n : {6, 40, 3}) params.push_back(torch::zeros({n}, dtype).requires_grad_(true));
    for (auto& p : params) p.mutable_grad() = torch::randn_like(p);
    GradientReducer reducer(params, 1 << 20);
    const double norm = reducer.gradient_norm();
    std::vector<torch::Tensor> before;
    for (auto& p : params) before.push_back(p.grad().clone());
    reducer.clip_norm(norm * 1.5);
    for (std::size_t i = 0; i < params.size(); ++i) EXPECT_TRUE(torch::equal(params[i].grad(), before[i])) << i;
    reducer.clip_norm(0.25 * norm);
    const double tolerance = dtype == torch::kFloat32 ? 1e-6 : 1e-14;
    EXPECT_NEAR(reducer.gradient_norm(), 0.25 * norm, tolerance * norm);
    for (std::size_t i = 0; i < params.size(); ++i)
      EXPECT_TRUE(torch::equal(params[i].grad(), before[i].mul(0.25 * norm / norm))) << i;
  }
}

// CUDA's fused Adam takes gradients with their parameters' strides only: the recorded step's
// gradients (autograd::grad's, whatever the graph made) are laid out so first.
TEST(Training, GradientsAreLaidOutAsTheirParameters) {
  const torch::Tensor param = torch::zeros({4, 3}, torch::kFloat64);
  const torch::Tensor transposed = torch::randn({3, 4}, torch::kFloat64).t();
  const torch::Tensor laid = FusedAdam::laid_out_as(transposed, param);
  EXPECT_EQ(laid.strides(), param.strides());
  EXPECT_TRUE(torch::equal(laid, transposed));
  const torch::Tensor plain = torch::randn({4, 3}, torch::kFloat64);
  EXPECT_TRUE(FusedAdam::laid_out_as(plain, param).is_same(plain));   // no copy where none is needed
  EXPECT_FALSE(FusedAdam::laid_out_as(torch::Tensor(), param).defined());
}

// FusedAdam itself against torch::optim's Adam and AdamW (AMSGrad, weight decay), step by step
// on the same gradients: the same parameters (they moved) and state up to rounding, with the state
// made and counted as torch::optim does.
TEST(Training, FusedAdamStepsAsTorchOptim) {
  for (const bool adamw : {false, true}) {
    torch::manual_seed(11);
    std::vector<torch::Tensor> a = {torch::randn({7, 5}, torch::kFloat64), torch::randn({5}, torch::kFloat64)};
    std::vector<torch::Tensor> b;
    for (auto& t : a) {
      t.requires_grad_(true);
      b.push_back(t.detach().clone().requires_grad_(true));
    }
    std::unique_ptr<torch::optim::Optimizer> plain, fused_state;
    if (adamw) {
      plain = std::make_unique<torch::optim::AdamW>(a, torch::optim::AdamWOptions(0.01).weight_decay(0.1).amsgrad(true));
      fused_state = std::make_unique<torch::optim::AdamW>(b, torch::optim::AdamWOptions(0.01).weight_decay(0.1).amsgrad(true));
    } else {
      plain = std::make_unique<torch::optim::Adam>(a, torch::optim::AdamOptions(0.01).weight_decay(0.1));
      fused_state = std::make_unique<torch::optim::Adam>(b, torch::optim::AdamOptions(0.01).weight_decay(0.1));
    }
    FusedAdam fused(*fused_state, adamw);
    const torch::Tensor start = b[0].detach().clone();
    for (int step = 0; step < 6; ++step) {
      for (std::size_t k = 0; k < a.size(); ++k) {
        const torch::Tensor g = torch::randn_like(a[k]);
        a[k].mutable_grad() = g.clone();
        b[k].mutable_grad() = g.clone();
      }
      plain->step();
      fused.step();
      for (std::size_t k = 0; k < a.size(); ++k) {
        EXPECT_LE((a[k] - b[k]).abs().max().item<double>(), 1e-13) << (adamw ? "adamw" : "adam") << " step " << step;
      }
    }
    EXPECT_GT((b[0] - start).abs().max().item<double>(), 1e-3);   // six steps of lr 0.01 moved it
    for (const auto& p : b) {
      // The state as the optimizer's own type (its checkpoint reads it so).
      const torch::optim::OptimizerParamState& any = *fused_state->state().at(p.unsafeGetTensorImpl());
      if (adamw) {
        const auto* st = dynamic_cast<const torch::optim::AdamWParamState*>(&any);
        ASSERT_NE(st, nullptr) << "AdamW's state made as another type";
        EXPECT_EQ(st->step(), 6);
        EXPECT_TRUE(st->max_exp_avg_sq().defined());
      } else {
        const auto* st = dynamic_cast<const torch::optim::AdamParamState*>(&any);
        ASSERT_NE(st, nullptr) << "Adam's state made as another type";
        EXPECT_EQ(st->step(), 6);
        EXPECT_FALSE(st->max_exp_avg_sq().defined());
      }
    }
  }
}

// training.optimizer.fused (ATen's fused Adam kernels, the default on GPUs) trains as
// torch::optim's Adam and AdamW (AMSGrad, weight decay) up to rounding, and a fused run interrupted
// and resumed from its checkpoint (the moments and counts are the optimizer's state) equals the
// uninterrupted one bitwise.
TEST(Training, FusedAdamTrainsAsTorchOptimAndResumesBitwise) {
  TempDir dir("mlip_test_fused_adam");
  SerialCommunicator comm;
  auto params = [&](const std::string& name, std::vector<std::string> overrides, int stop_after = 0) {
    const std::string out = (dir.path / name).string();
    const std::string cfg = tiny_config(dir, out, 3);
    overrides.push_back("training.device=cpu");
    Trainer t(read_config(cfg, overrides), "", comm);
    ::testing::internal::CaptureStdout();
    t.run(false, stop_after);
    const std::string log = ::testing::internal::GetCapturedStdout();
    const bool fused = std::find(overrides.begin(), overrides.end(), "training.optimizer.fused=true") != overrides.end();
    EXPECT_EQ(log.find("by ATen's fused kernel") != std::string::npos, fused) << name;
    if (stop_after > 0) {
      Trainer r(read_config(cfg, overrides), "", comm);
      r.run(true);
    }
    return checkpoint_parameters(fs::path(out) / "checkpoints" / "epoch-000003");
  };
  const std::vector<std::vector<std::string>> variants = {
      {}, {"training.optimizer.type=adamw", "training.optimizer.weight_decay=0.01", "training.optimizer.amsgrad=true"}};
  for (std::size_t v = 0; v < variants.size(); ++v) {
    auto with = [&](const std::string& fused) {
      std::vector<std::string> o = variants[v];
      o.push_back("training.optimizer.fused=" + fused);
      return o;
    };
    const std::string tag = std::to_string(v);
    const auto plain = params("plain" + tag, with("false"));
    const auto fused = params("fused" + tag, with("true"));
    const auto split = params("split" + tag, with("true"), 2);
    ASSERT_FALSE(plain.empty());
    ASSERT_EQ(plain.size(), fused.size());
    double largest = 0;
    for (std::size_t i = 0; i < plain.size(); ++i) {
      const double scale = std::max(plain[i].abs().max().item<double>(), 1e-3);
      largest = std::max(largest, (fused[i] - plain[i]).abs().max().item<double>() / scale);
      EXPECT_TRUE(torch::equal(fused[i], split[i])) << "variant " << v << ", resumed, parameter " << i;
    }
    EXPECT_LE(largest, 1e-10) << "variant " << v;
    std::printf("fused Adam, variant %zu: largest parameter difference from torch::optim after 3 epochs %.3g "
                "(relative)\n", v, largest);
  }
  EXPECT_NE(error_of(tiny_config(dir, (dir.path / "e").string(), 1), {"training.optimizer.fused=maybe"})
                .find("training.optimizer.fused must be auto, true or false, not 'maybe'"),
            std::string::npos);
}

// The trainer on a GPU (skipped without one): interrupted + resumed equals uninterrupted bitwise
// (training.deterministic), data kept on the device equals batches copied per step bitwise, and
// the GPU run follows the CPU run (float64) to round-off.
TEST(TrainingGpu, ResumeDataPathsAndCpuAgreement) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir("mlip_test_gpu_training");
  SerialCommunicator comm;
  auto params = [&](const std::string& name, const std::vector<std::string>& overrides, int stop_after = 0,
                    bool resume_after = false) {
    const std::string out = (dir.path / name).string();
    const std::string cfg = tiny_config(dir, out, 3);
    Trainer t(read_config(cfg, overrides), "", comm);
    t.run(false, stop_after);
    if (resume_after) {
      Trainer r(read_config(cfg, overrides), "", comm);
      r.run(true);
    }
    return checkpoint_parameters(fs::path(out) / "checkpoints" / "epoch-000003");
  };
  const auto full = params("full", {"training.device=cuda"});
  const auto split = params("split", {"training.device=cuda"}, 2, true);
  const auto host = params("host", {"training.device=cuda", "training.data_on_device=false"});
  const auto cpu = params("cpu", {"training.device=cpu"});
  ASSERT_FALSE(full.empty());
  for (std::size_t i = 0; i < full.size(); ++i) {
    EXPECT_TRUE(torch::equal(full[i], split[i])) << "resume, parameter " << i;
    EXPECT_TRUE(torch::equal(full[i], host[i])) << "data on device, parameter " << i;
    const double scale = cpu[i].abs().max().item<double>();
    EXPECT_LE((full[i] - cpu[i]).abs().max().item<double>(), 1e-8 * scale) << "GPU vs CPU, parameter " << i;
  }
}

// training.cuda_graph true on a GPU: the recorded step's replays follow the same step run eagerly
// (the code path the CPU tests check), a run stopped and resumed (recorded anew at the capacities its
// checkpoint kept) ends bitwise as the run without a stop, batches copied from the host follow those gathered from the frame bank (the
// frames on the GPU), and all stay within rounding of the plain grouped step (the recorded step
// reads the learning rate as float32).
TEST(TrainingGpu, RecordedStepFollowsTheEagerStep) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  TempDir dir("mlip_test_gpu_recorded_step");
  SerialCommunicator comm;
  auto params = [&](const std::string& name, const std::vector<std::string>& overrides, int stop_after = 0) {
    const std::string out = (dir.path / name).string();
    const std::string cfg = tiny_config(dir, out, 3);
    std::vector<std::string> all = {"training.device=cuda", "training.grouped=true", "training.optimizer.fused=true",
                                    "training.grad_clip=0.05"};
    all.insert(all.end(), overrides.begin(), overrides.end());
    Trainer t(read_config(cfg, all), "", comm);
    t.run(false, stop_after);
    if (stop_after > 0) {
      Trainer r(read_config(cfg, all), "", comm);
      r.run(true);
    }
    return checkpoint_parameters(fs::path(out) / "checkpoints" / "epoch-000003");
  };
  const auto recorded = params("recorded", {"training.cuda_graph=true"});
  const auto eager = params("eager", {"training.cuda_graph=eager"});
  const auto resumed = params("resumed", {"training.cuda_graph=true"}, 2);
  // the frames on the GPU (the default here: batches gathered from the frame bank) and copied per batch
  const auto host = params("host", {"training.cuda_graph=true", "training.data_on_device=false"});
  const auto plain = params("plain", {});
  ASSERT_FALSE(recorded.empty());
  for (std::size_t i = 0; i < recorded.size(); ++i) {
    const double scale = plain[i].abs().max().item<double>();
    EXPECT_LE((recorded[i] - eager[i]).abs().max().item<double>(), 1e-12 * scale) << "recorded vs eager, parameter " << i;
    EXPECT_LE((recorded[i] - host[i]).abs().max().item<double>(), 1e-12 * scale) << "bank vs host batches, parameter " << i;
    // the resumed run pads to the capacities its checkpoint kept: the same shapes, the same bits
    EXPECT_TRUE(torch::equal(recorded[i], resumed[i])) << "resumed, parameter " << i;
    EXPECT_LE((recorded[i] - plain[i]).abs().max().item<double>(), 1e-6 * scale) << "recorded vs plain, parameter " << i;
  }
}

// Checkpoint files: a failed write names the file and the cause; altered or truncated files are
// found by their digests, and --resume falls back to the newest intact checkpoint.
TEST(Checkpoint, FailedWritesNameTheFileAndTheCause) {
  const std::string big(1 << 20, 'x');
  try {
    checkpoint::write_file("/dev/full", big);
    ADD_FAILURE() << "no error writing to /dev/full";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("/dev/full: write failed after 0 of 1048576 bytes: No space left on device"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(checkpoint::write_file("/nonexistent-dir/x", "y"), Error);
}

TEST(Checkpoint, DamagedCheckpointsAreFoundAndResumeUsesTheNewestIntactOne) {
  TempDir dir("mlip_test_damaged_checkpoint");
  SerialCommunicator comm;
  const std::string out = (dir.path / "run").string();
  Trainer first(read_config(tiny_config(dir, out, 3)), "", comm);
  first.run(false);
  const fs::path ck = fs::path(out) / "checkpoints";
  EXPECT_EQ(checkpoint::verify(ck / "epoch-000003"), "");
  EXPECT_EQ(checkpoint::verify(ck / "best"), "");
  {  // one flipped byte in the middle of the weights
    std::fstream f(ck / "epoch-000003" / "model.pt", std::ios::in | std::ios::out | std::ios::binary);
    const auto middle = static_cast<std::streamoff>(fs::file_size(ck / "epoch-000003" / "model.pt") / 2);
    f.seekg(middle);
    const char c = static_cast<char>(f.get());
    f.seekp(middle);
    f.put(static_cast<char>(~c));
  }
  EXPECT_NE(checkpoint::verify(ck / "epoch-000003").find("model.pt does not match its CRC-32"), std::string::npos);
  fs::resize_file(ck / "epoch-000002" / "optimizer.pt", 100);
  EXPECT_NE(checkpoint::verify(ck / "epoch-000002").find("optimizer.pt has 100 bytes"), std::string::npos);
  fs::remove(ck / "epoch-000001" / "state.json");
  EXPECT_NE(checkpoint::verify(ck / "epoch-000001").find("state.json is missing"), std::string::npos);
  // Nothing intact: resume refuses, saying so.
  const std::string none = train_error(tiny_config(dir, out, 4), {}, /*resume=*/true);
  EXPECT_NE(none.find("no checkpoint is intact"), std::string::npos) << none;
  // A fresh run writes epochs 1-2; damage epoch 2: resume continues from epoch 1.
  const std::string out2 = (dir.path / "run2").string();
  Trainer second(read_config(tiny_config(dir, out2, 3)), "", comm);
  second.run(false, /*stop_after_epochs=*/2);
  fs::resize_file(fs::path(out2) / "checkpoints" / "epoch-000002" / "model.pt", 10);
  Trainer resumed(read_config(tiny_config(dir, out2, 3)), "", comm);
  resumed.run(true);
  EXPECT_EQ(resumed.state().epoch, 3);
  EXPECT_EQ(checkpoint::verify(fs::path(out2) / "checkpoints" / "epoch-000003"), "");
  // best/ holds the best epoch of the run as resumed, not one of the abandoned checkpoint.
  const auto best_state = nlohmann::json::parse(std::ifstream(fs::path(out2) / "checkpoints" / "best" / "state.json"));
  EXPECT_EQ(best_state.at("epoch").get<int64_t>(), resumed.state().best_epoch);
}

// Checkpoints of an older mlip-trainer have no digests.json: they resume, and best/ is sealed.
TEST(Checkpoint, CheckpointsWithoutDigestsResume) {
  TempDir dir("mlip_test_old_checkpoints");
  SerialCommunicator comm;
  const std::string out = (dir.path / "run").string();
  Trainer first(read_config(tiny_config(dir, out, 3)), "", comm);
  first.run(false, 2);
  for (const auto& e : fs::directory_iterator(fs::path(out) / "checkpoints")) fs::remove(e.path() / "digests.json");
  Trainer resumed(read_config(tiny_config(dir, out, 3)), "", comm);
  resumed.run(true);
  EXPECT_EQ(resumed.state().epoch, 3);
  EXPECT_EQ(checkpoint::verify(fs::path(out) / "checkpoints" / "best"), "");
}

TEST(Checkpoint, ResumeRefusesADifferentModelAndListsTheKeys) {
  TempDir dir("mlip_test_resume_model");
  SerialCommunicator comm;
  const std::string out = (dir.path / "run").string();
  const std::string cfg = tiny_config(dir, out, 2);
  Trainer first(read_config(cfg), "", comm);
  first.run(false, 1);
  auto resume_error = [&](const std::vector<std::string>& overrides) { return train_error(cfg, overrides, true); };
  const std::string e = resume_error({"model.cutoff=4.5", "model.hyperparameters.fitting=[8, 16]"});
  EXPECT_NE(e.find("differs from the model of checkpoint"), std::string::npos) << e;
  EXPECT_NE(e.find("model.cutoff"), std::string::npos) << e;
  EXPECT_NE(e.find("model.hyperparameters.fitting"), std::string::npos) << e;
  EXPECT_NE(resume_error({"model.species=[C, H, O]"}).find("model.species"), std::string::npos);
  EXPECT_NE(resume_error({"model.dtype=float32"}).find("model.dtype"), std::string::npos);
  // The data, batch and schedule may change.
  EXPECT_EQ(resume_error({"data.batch.frames=3"}), "no error");
}

// Labels the loss weights but the data lacks: a warning naming the source and the count, and
// "n/a" (never 0) for their metrics; `test` on data without any label is an error that leaves
// earlier CSV results in place.
TEST(Training, MissingLabelsAreWarnedAndShownAsNA) {
  TempDir dir("mlip_test_missing_labels");
  SerialCommunicator comm;
  auto frames = read_extxyz(mlip::testing::source_dir() + "/data/ethanol-rmd17/rmd17_ethanol_1000.xyz",
                            ReadOptions{Units{"angstrom", "kcal/mol", ""}, {}});
  frames.resize(12);
  for (auto& f : frames) f.forces.clear();  // energies only
  const std::string data = (dir.path / "energies-only.xyz").string();
  write_extxyz(data, frames);
  std::string cfg = tiny_config(dir, (dir.path / "run").string(), 1);
  ::testing::internal::CaptureStdout();
  Trainer t(read_config(cfg, {"data.train=[" + data + "]"}), "", comm);
  t.run(false);
  const std::string out = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(out.find("WARNING: " + data + ": 12 of 12 frames have no forces"), std::string::npos) << out;
  EXPECT_NE(out.find("F n/a meV/A"), std::string::npos) << out;
  EXPECT_TRUE(std::isnan(t.validate().forces_rmse()));

  // A model species absent from the data warns; a cutoff too short for any pair in every
  // training frame is an error (the model could learn only an energy per species).
  ::testing::internal::CaptureStdout();
  Trainer extra_species(read_config(cfg, {"data.train=[" + data + "]", "model.species=[H, C, O, N]",
                                          "output.dir=" + (dir.path / "run-species").string()}),
                        "", comm);
  extra_species.run(false);
  const std::string warned = ::testing::internal::GetCapturedStdout();
  EXPECT_NE(warned.find("model species 'N' (model.species) occurs in no training frame"), std::string::npos) << warned;
  try {
    Trainer short_cutoff(read_config(cfg, {"data.train=[" + data + "]", "model.cutoff=0.5",
                                           "model.hyperparameters.rcut_smth=0.2",
                                           "output.dir=" + (dir.path / "run-short").string()}),
                         "", comm);
    short_cutoff.run(false);
    ADD_FAILURE() << "a cutoff under which no atom has a neighbour did not stop the run";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("model.cutoff 0.5 A: no atom of the 9 training frames has a neighbour within it"),
              std::string::npos) << e.what();
  }

  for (auto& f : frames) f.energy.reset();  // no label at all
  const std::string bare = (dir.path / "unlabelled.xyz").string();
  write_extxyz(bare, frames);
  const std::string csv = dir.file("frames.csv", "earlier results\n");
  TestOptions outputs;
  outputs.per_frame_csv = csv;
  try {
    test_model((dir.path / "run" / "model.pt").string(), bare, "auto", Units{}, outputs, [](const std::string&) {});
    ADD_FAILURE() << "test on unlabelled data did not fail";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nothing to test the model against"), std::string::npos) << e.what();
  }
  std::ifstream in(csv);
  std::string first;
  std::getline(in, first);
  EXPECT_EQ(first, "earlier results");
}

// `mlip-trainer test` evaluates models as pair_style mlip does: its errors are those of the
// reference evaluation the LAMMPS tests compare the pair style with (support/reference.h).
TEST(Evaluation, TestCommandAgreesWithTheReferenceEvaluation) {
  TempDir dir("mlip_test_evaluation");
  const std::string model_path = (dir.path / "m.pt").string();
  mlip::testing::write_test_model("se_e2_a", model_path);
  const Model model = Model::load(model_path);
  std::vector<Structure> frames = read_deepmd(mlip::testing::source_dir() + "/data/water-deepmd/data_0");
  frames.resize(3);
  const std::string data = (dir.path / "water.xyz").string();
  write_extxyz(data, frames);
  double force_sq = 0, force_n = 0, energy_sq = 0;
  for (const Structure& s : frames) {
    const auto ref = mlip::testing::evaluate_reference(model, s);
    for (std::size_t i = 0; i < s.size(); ++i)
      for (int d = 0; d < 3; ++d) force_sq += std::pow(ref.forces[i][d] - s.forces[i][d], 2);
    force_n += 3.0 * static_cast<double>(s.size());
    energy_sq += std::pow((ref.energy - *s.energy) / static_cast<double>(s.size()), 2);
  }
  const MetricSums sums = test_model(model_path, data, "auto", Units{}, TestOptions{}, [](const std::string&) {});
  EXPECT_NEAR(sums.forces_rmse(), std::sqrt(force_sq / force_n), 1e-12 * std::sqrt(force_sq / force_n));
  EXPECT_NEAR(sums.energy_rmse(), std::sqrt(energy_sq / 3.0), 1e-12 * std::sqrt(energy_sq / 3.0));
}

// `mlip-trainer deviation`: the file's columns against DeePMD-kit's definitions written out on
// the committee's reference evaluations (models of different architectures and cutoffs), and
// the candidates between the trust levels.
// `mlip-trainer import`: settings and weights (a torch.save'd dict, here written by LibTorch's
// pickle_save, the same format) become a model file that evaluates with exactly those weights;
// weights that do not fit the settings are errors naming the file and the tensor.
TEST(Import, WeightsBecomeAModelAndMisfitsAreNamed) {
  TempDir dir("mlip_test_import");
  ModelSpec spec;
  spec.architecture = "mace";
  spec.species = {"H", "O"};
  spec.cutoff = 3.0;
  spec.hyperparameters = {{"num_channels", 4}, {"max_L", 1}, {"max_ell", 2}, {"correlation", 2},
                          {"radial_MLP", {8}}, {"MLP_irreps", "4x0e"}, {"avg_num_neighbors", 5.0}};
  spec.seed = 11;
  const BuiltModel source = build_model(spec);
  const std::string spec_path = (dir.path / "spec.json").string();
  std::ofstream(spec_path) << nlohmann::json{{"architecture", "mace"},      {"species", spec.species},
                                             {"cutoff", spec.cutoff},        {"dtype", "float64"},
                                             {"hyperparameters", spec.hyperparameters}}.dump();
  auto write_weights = [&](const std::map<std::string, torch::Tensor>& w, const std::string& name) {
    c10::Dict<std::string, torch::Tensor> dict;
    for (const auto& [k, t] : w) dict.insert(k, t.detach());
    const std::vector<char> bytes = torch::jit::pickle_save(dict);
    const std::string path = (dir.path / name).string();
    std::ofstream(path, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    return path;
  };
  std::map<std::string, torch::Tensor> weights;
  for (const auto& p : source.module.named_parameters(/*recurse=*/true)) weights[p.name] = p.value;
  const std::string model_path = (dir.path / "model.pt").string();
  import_model(spec_path, write_weights(weights, "w.pt"), model_path, {});
  // The same function as the source (seed 11) and not as a model of another seed.
  const Structure s = read_deepmd(mlip::testing::source_dir() + "/data/water-deepmd/data_0")[0];
  const double imported = mlip::testing::evaluate_reference(Model::load(model_path), s).energy;
  const double direct =
      mlip::testing::evaluate_reference(Model(source.module, source.metadata, torch::kCPU), s).energy;
  EXPECT_NEAR(imported, direct, 1e-10 * std::abs(direct));
  auto error_of = [&](const std::map<std::string, torch::Tensor>& w, const std::string& name) -> std::string {
    try {
      import_model(spec_path, write_weights(w, name), (dir.path / "bad.pt").string(), {});
    } catch (const Error& e) {
      return e.what();
    }
    return "no error";
  };
  auto missing = weights;
  missing.erase("l0_up_w");
  EXPECT_NE(error_of(missing, "missing.pt").find("missing.pt: lacks the parameter 'l0_up_w'"), std::string::npos);
  auto misshapen = weights;
  misshapen["l0_up_w"] = torch::zeros({3}, torch::kFloat64);
  EXPECT_NE(error_of(misshapen, "shape.pt").find("shape.pt: 'l0_up_w' has shape [3], the model's is [16]"),
            std::string::npos)
      << error_of(misshapen, "shape.pt");
  auto unknown = weights;
  unknown["l9_up_w"] = torch::zeros({3}, torch::kFloat64);
  EXPECT_NE(error_of(unknown, "unknown.pt").find("'l9_up_w' is not a tensor of a mace model"), std::string::npos);
  const std::string garbage = (dir.path / "garbage.pt").string();
  std::ofstream(garbage) << "not a pickle";
  try {
    import_model(spec_path, garbage, (dir.path / "bad.pt").string(), {});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("garbage.pt: not a file written by torch.save"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path / "bad.pt"));  // nothing written on an error
}

TEST(Deviation, OfflineDeviationMatchesDefinitionsAndPicksCandidates) {
  TempDir dir("mlip_test_deviation");
  std::vector<std::string> models;
  for (const char* name : {"se_e2_a", "se_e2_a_md", "painn"}) {
    models.push_back((dir.path / (std::string(name) + ".pt")).string());
    mlip::testing::write_test_model(name, models.back());
  }
  std::vector<Structure> frames = read_deepmd(mlip::testing::source_dir() + "/data/water-deepmd/data_0");
  frames.resize(4);
  const std::string data = (dir.path / "water.xyz").string();
  write_extxyz(data, frames);
  std::vector<std::array<double, 7>> expected;
  for (const Structure& s : frames) {
    std::vector<mlip::testing::Evaluation> ev;
    for (const auto& m : models) ev.push_back(mlip::testing::evaluate_reference(Model::load(m), s));
    auto stddev = [&](auto value) {
      double mean = 0, sq = 0;
      for (const auto& e : ev) mean += value(e) / 3.0;
      for (const auto& e : ev) sq += std::pow(value(e) - mean, 2) / 3.0;
      return std::sqrt(sq);
    };
    const double n = static_cast<double>(s.size());
    double fmax = 0, fmin = 1e300, fsum = 0, vmax = 0, vmin = 1e300, vsum = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      double var = 0;
      for (int d = 0; d < 3; ++d) var += std::pow(stddev([&](const auto& e) { return e.forces[i][d]; }), 2);
      fmax = std::max(fmax, std::sqrt(var));
      fmin = std::min(fmin, std::sqrt(var));
      fsum += std::sqrt(var);
    }
    for (int a = 0; a < 3; ++a)
      for (int b = 0; b < 3; ++b) {
        const double v = stddev([&](const auto& e) { return e.virial[a][b]; }) / n;
        vmax = std::max(vmax, v);
        vmin = std::min(vmin, v);
        vsum += v;
      }
    expected.push_back({vmax, vmin, vsum / 9, fmax, fmin, fsum / n, stddev([](const auto& e) { return e.energy; }) / n});
  }
  // Trust levels between the frames' largest force deviations: frames 1 and 2 of the sorted four.
  std::vector<double> max_f;
  for (const auto& e : expected) max_f.push_back(e[3]);
  std::vector<double> sorted = max_f;
  std::sort(sorted.begin(), sorted.end());
  DeviationOptions options;
  options.output = (dir.path / "devi.out").string();
  options.candidates = (dir.path / "picked.xyz").string();
  options.trust_lo = 0.5 * (sorted[0] + sorted[1]);
  options.trust_hi = 0.5 * (sorted[2] + sorted[3]);
  const DeviationCounts c = model_deviation(models, data, options, [](const std::string&) {});
  EXPECT_EQ(c.frames, 4u);
  EXPECT_EQ(c.accurate, 1u);
  EXPECT_EQ(c.candidates, 2u);
  EXPECT_EQ(c.failed, 1u);
  std::ifstream in(options.output);
  std::string line;
  std::size_t row = 0;
  while (std::getline(in, line)) {
    if (line[0] == '#') continue;
    std::istringstream words(line);
    double frame = -1;
    words >> frame;
    EXPECT_EQ(frame, static_cast<double>(row));
    for (int k = 0; k < 7; ++k) {
      double v = 0;
      words >> v;
      EXPECT_NEAR(v, expected[row][k], 1e-9 * std::abs(expected[row][k])) << "frame " << row << " column " << k + 2;
    }
    ++row;
  }
  EXPECT_EQ(row, 4u);
  const std::vector<Structure> picked = read_extxyz(options.candidates);
  ASSERT_EQ(picked.size(), 2u);
  for (const Structure& p : picked) {
    const auto it = std::find_if(frames.begin(), frames.end(), [&](const Structure& f) { return f.positions == p.positions; });
    ASSERT_NE(it, frames.end());
    const double m = max_f[static_cast<std::size_t>(it - frames.begin())];
    EXPECT_TRUE(m >= options.trust_lo && m < options.trust_hi) << m;
  }
  EXPECT_THROW(model_deviation({models[0]}, data, options, [](const std::string&) {}), Error);
}

// Export from a checkpoint: float64, float32 (rounded weights) and compressed (tables down to
// 0.75 x the shortest training distance, from the provenance), all run by the same evaluation.
TEST(Export, Float32AndCompressedFromACheckpoint) {
  TempDir dir("mlip_test_export_options");
  SerialCommunicator comm;
  Trainer t(read_config(tiny_config(dir, (dir.path / "run").string(), 1)), "", comm);
  t.run(false);
  const std::string best = (dir.path / "run" / "checkpoints" / "best").string();
  const std::string f64 = (dir.path / "f64.pt").string(), f32 = (dir.path / "f32.pt").string(),
                    c64 = (dir.path / "c64.pt").string();
  export_checkpoint(best, f64, {});
  ExportOptions single;
  single.dtype = "float32";
  export_checkpoint(best, f32, {}, single);
  ExportOptions compressed;
  compressed.compress = true;
  std::string report;
  export_checkpoint(best, c64, {}, compressed, [&](const std::string& s) { report += s; });
  EXPECT_NE(report.find("compressed: 3 embedding nets"), std::string::npos) << report;
  const Model a = Model::load(f64), b = Model::load(f32), c = Model::load(c64);
  EXPECT_EQ(b.info().dtype, "float32");
  EXPECT_TRUE(c.info().compressed);
  const double shortest = a.metadata().provenance.at("shortest_training_distance").get<double>();
  EXPECT_NEAR(c.metadata().hyperparameters["compression"]["min_distance"].get<double>(), 0.75 * shortest, 1e-12);
  auto frames = read_extxyz(mlip::testing::source_dir() + "/data/ethanol-rmd17/rmd17_ethanol_1000.xyz",
                            ReadOptions{Units{"angstrom", "kcal/mol", ""}, {}});
  double df32 = 0, dc = 0, fmax = 0;
  for (int k : {100, 600, 900}) {
    const auto ra = mlip::testing::evaluate_reference(a, frames[k]);
    const auto rb = mlip::testing::evaluate_reference(b, frames[k]);
    const auto rc = mlip::testing::evaluate_reference(c, frames[k]);
    for (std::size_t i = 0; i < frames[k].size(); ++i) {
      for (int d = 0; d < 3; ++d) {
        fmax = std::max(fmax, std::abs(ra.forces[i][d]));
        df32 = std::max(df32, std::abs(rb.forces[i][d] - ra.forces[i][d]));
        dc = std::max(dc, std::abs(rc.forces[i][d] - ra.forces[i][d]));
      }
    }
  }
  std::printf("[ export ] largest force %.3g eV/A; float32 export differs by %.2e eV/A, compressed by %.2e eV/A\n",
              fmax, df32, dc);
  EXPECT_LE(df32, 1e-4 * fmax);
  EXPECT_LE(dc, 1e-6);
  ExportOptions wrong;
  wrong.dtype = "float16";
  EXPECT_THROW(export_checkpoint(best, (dir.path / "x.pt").string(), {}, wrong), Error);
}

// training.grouped true: the tiny problem trained on grouped batches follows the plain run (the
// same steps up to rounding) and validates alike (validation batches grouped too); a model without
// forward_grouped() is refused with its name.
TEST(Training, GroupedBatchesTrainAsPlainOnes) {
  TempDir dir("mlip_test_grouped_training");
  SerialCommunicator comm;
  std::vector<std::vector<torch::Tensor>> params;
  std::vector<std::vector<double>> validation;   // each epoch's validation loss and errors
  for (const bool grouped : {false, true}) {
    const fs::path out = dir.path / (grouped ? "run-grouped" : "run-plain");
    Config c = read_config(tiny_config(dir, out.string(), 3));
    c.grouped = grouped;
    Trainer t(c, "", comm);
    t.run(false);
    params.push_back(checkpoint_parameters(out));
    std::ifstream csv(out / "metrics.csv");
    std::vector<double> v;
    std::string line;
    std::getline(csv, line);   // the header
    while (std::getline(csv, line)) {
      std::stringstream cells(line);
      std::string cell;
      for (int k = 0; std::getline(cells, cell, ','); ++k)
        if (k >= 5 && cell != "nan") v.push_back(std::stod(cell));   // val_loss, val E, F, V RMSE
    }
    validation.push_back(v);
  }
  ASSERT_EQ(params[0].size(), params[1].size());
  for (std::size_t i = 0; i < params[0].size(); ++i)
    EXPECT_TRUE(torch::allclose(params[1][i], params[0][i], 1e-8, 1e-10)) << "parameter " << i;
  // Validation on grouped batches too: the same losses and errors (6 digits in metrics.csv).
  ASSERT_EQ(validation[0].size(), validation[1].size());
  ASSERT_EQ(validation[0].size(), 9u);   // 3 epochs x (loss, E, F): no virial labels
  for (std::size_t i = 0; i < validation[0].size(); ++i)
    EXPECT_NEAR(validation[1][i], validation[0][i], 2e-6 * std::abs(validation[0][i])) << "metrics.csv value " << i;
  Config painn = read_config(tiny_config(dir, (dir.path / "run-painn").string(), 1));
  painn.model.architecture = "painn";
  painn.model.hyperparameters = {{"features", 4}, {"layers", 2}, {"radial_basis", 4}};
  painn.grouped = true;
  try {
    Trainer t(painn, "", comm);
    t.run(false);
    ADD_FAILURE() << "no error";
  } catch (const mlip::Error& e) {
    EXPECT_NE(std::string(e.what()).find("training.grouped: true needs a model with forward_grouped()"), std::string::npos)
        << e.what();
  }
}

TEST(Training, LossDecreasesOnTinyProblem) {
  TempDir dir("mlip_test_tiny_training");
  SerialCommunicator comm;
  Trainer t(read_config(tiny_config(dir, (dir.path / "run").string(), 1)), "", comm);
  t.run(false);
  Trainer longer(read_config(tiny_config(dir, (dir.path / "run2").string(), 15)), "", comm);
  longer.run(false);
  const MetricSums a = t.validate(), b = longer.validate();
  EXPECT_LT(b.forces_rmse(), a.forces_rmse());
}

}  // namespace
}  // namespace mlip::trainer

namespace mlip::trainer {
namespace {

// Three frames of rMD17 ethanol (the second with a virial label) at a 4 A cutoff.
std::vector<Frame> three_ethanols() {
  auto frames = read_extxyz(mlip::testing::source_dir() + "/data/ethanol-rmd17/rmd17_ethanol_1000.xyz",
                            ReadOptions{Units{"angstrom", "kcal/mol", ""}, {}});
  std::vector<Frame> out = {make_frame(frames[0], 4.0), make_frame(frames[300], 4.0), make_frame(frames[700], 4.0)};
  out[1].structure.virial = Mat3{{{1, 0, 0}, {0, 2, 0}, {0, 0, 3}}};
  return out;
}

// A small se_e2_a for H, C, O: one embedding net per neighbour species (one_side) or per pair,
// with a ZBL prior felt below 1.3 A when `zbl` (ethanol's C-H bonds are shorter); and how it groups.
// residual: first layers that keep or double their width (embedding 1 -> 2, fitting 8 -> 8 -> 16)
BuiltModel small_se_e2_a(bool one_side, bool zbl = false, bool residual = false) {
  ModelSpec spec;
  spec.architecture = "se_e2_a";
  spec.species = {"H", "C", "O"};
  spec.cutoff = 4.0;
  spec.hyperparameters = {{"embedding", {4, 8}}, {"axis_neurons", 2}, {"fitting", {8, 8}}, {"type_one_side", one_side}};
  if (residual) spec.hyperparameters.update({{"embedding", {2, 4}}, {"fitting", {8, 16}}});
  if (zbl) spec.repulsion = "zbl";
  BuiltModel m = build_model(spec);
  if (zbl) fit_repulsion(m, std::vector<double>(9, 1.3));
  return m;
}
GroupingRule small_se_e2_a_rule(bool one_side) {
  GroupingRule rule;
  rule.n_species = 3;
  rule.pair_nets = !one_side;
  rule.pad_length = 8.0;
  return rule;
}

// Grouped steps leave out the repulsion prior only where it is zero on every training edge: the
// check (its radii at most the data's shortest distances, within float32's rounding), and
// forward_grouped_learned() equal to forward_grouped() there, not where the prior is felt.
TEST(Training, GroupedStepsLeaveOutThePriorOnlyWhereItIsZero) {
  BuiltModel m = small_se_e2_a(/*one_side=*/false, /*zbl=*/true);   // radii 1.3 A
  EXPECT_TRUE(prior_is_zero_on(m.module, std::vector<double>(9, 1.3)));
  EXPECT_TRUE(prior_is_zero_on(m.module, std::vector<double>(9, 1.3 * (1 + 1e-7))));
  std::vector<double> closer(9, 1.3);
  closer[1] = 1.0;   // H-C pairs at 1.0 A: inside the prior
  EXPECT_FALSE(prior_is_zero_on(m.module, closer));
  std::vector<double> absent(9, 1.3);
  absent[8] = std::numeric_limits<double>::infinity();   // no O-O edge: nothing to feel it
  EXPECT_TRUE(prior_is_zero_on(m.module, absent));
  BuiltModel plain = small_se_e2_a(false);
  EXPECT_FALSE(prior_is_zero_on(plain.module, std::vector<double>(9, 1.3)));   // no prior

  const std::vector<Frame> frames = three_ethanols();
  const SpeciesMap species({"H", "C", "O"});
  const BatchTensors b = group_batch(
      to_tensors(make_batch({&frames[0], &frames[1], &frames[2]}, species), torch::kFloat64), small_se_e2_a_rule(false));
  for (const double radius : {0.5, 1.3}) {   // below every bond; above ethanol's C-H and O-H bonds
    fit_repulsion(m, std::vector<double>(9, radius));
    const Prediction all = predict(m.module, b, /*create_graph=*/false);
    const Prediction learned = predict(m.module, b, /*create_graph=*/false, torch::kFloat64, /*without_prior=*/true);
    const double de = (all.energy - learned.energy).abs().max().item<double>();
    const double df = (all.forces - learned.forces).abs().max().item<double>();
    if (radius < 1.0) {
      EXPECT_EQ(de, 0.0);
      EXPECT_EQ(df, 0.0);
    } else {
      EXPECT_GT(de, 1e-3);
      EXPECT_GT(df, 1e-3);
    }
  }
}

// training.grouped: a batch regrouped for forward_grouped() (atoms by species, edges by net, from
// the host's counts) gives the plain batch's energies, forces (in its new atom order), virials,
// loss and parameter gradients, for one net per neighbour species and per species pair; the
// counts of frames made one by one and concatenated (frames kept on the device) are the whole
// batch's.
TEST(Training, GroupedBatchesGiveThePlainLossAndGradients) {
  const std::vector<Frame> batch_frames = three_ethanols();
  const SpeciesMap species({"H", "C", "O"});
  const BatchTensors plain =
      to_tensors(make_batch({&batch_frames[0], &batch_frames[1], &batch_frames[2]}, species), torch::kFloat64);
  std::vector<BatchTensors> one;
  for (const Frame& f : batch_frames) one.push_back(to_tensors(make_batch({&f}, species), torch::kFloat64));
  const BatchTensors joined = concat({&one[0], &one[1], &one[2]});
  EXPECT_EQ(joined.counts.species, plain.counts.species);
  EXPECT_EQ(joined.counts.pairs, plain.counts.pairs);
  EXPECT_EQ(plain.counts.species, (std::vector<int64_t>{18, 6, 3}));   // 3 ethanols: H6 C2 O
  for (const auto& [one_side, residual] : {std::pair{true, false}, std::pair{false, false}, std::pair{false, true}}) {
    BuiltModel m = small_se_e2_a(one_side, /*zbl=*/false, residual);
    const GroupingRule rule = small_se_e2_a_rule(one_side);
    const BatchTensors grouped = group_batch(joined, rule);
    EXPECT_EQ(grouped.center_groups, plain.counts.species);
    EXPECT_EQ(static_cast<int64_t>(grouped.edge_groups.size()), one_side ? 3 : 9);
    EXPECT_EQ(std::accumulate(grouped.edge_groups.begin(), grouped.edge_groups.end(), int64_t{0}), plain.edge_index.size(1));
    // grouped atom k is plain atom order[k]
    const torch::Tensor order = torch::argsort(plain.species, /*stable=*/true);
    EXPECT_TRUE(torch::equal(grouped.forces, plain.forces.index_select(0, order)));
    auto params = trainable_parameters(m.module);
    const auto run = [&](const BatchTensors& t, Prediction& p) {
      for (auto& x : params) x.mutable_grad() = torch::Tensor();
      p = predict(m.module, t, /*create_graph=*/true);
      torch::Tensor l = loss_terms(p, t, {1.0, 1.0, 0.1}, "mse", 0.0, 3.0, nullptr);
      l.backward({}, {}, false, params);
      std::vector<torch::Tensor> grads;
      for (auto& x : params) grads.push_back(x.grad().clone());
      return std::pair{l.item<double>(), grads};
    };
    Prediction pp, pg;
    const auto [lp, gp] = run(plain, pp);
    const auto [lg, gg] = run(grouped, pg);
    SCOPED_TRACE(std::string(one_side ? "one net per neighbour species" : "one net per species pair") +
                 (residual ? ", residual first layers" : ""));
    EXPECT_NEAR(lg, lp, 1e-12 * std::abs(lp));
    EXPECT_TRUE(torch::allclose(pg.energy, pp.energy, 1e-12, 1e-12));
    EXPECT_TRUE(torch::allclose(pg.forces, pp.forces.index_select(0, order), 1e-10, 1e-12));
    EXPECT_TRUE(torch::allclose(pg.virial, pp.virial, 1e-10, 1e-12));
    for (std::size_t i = 0; i < gp.size(); ++i) EXPECT_TRUE(torch::allclose(gg[i], gp[i], 1e-9, 1e-12)) << "parameter " << i;
    // The sizes are what forward_grouped() goes by: groups of other sizes give other forces.
    BatchTensors shifted = grouped;
    std::rotate(shifted.edge_groups.begin(), shifted.edge_groups.begin() + 1, shifted.edge_groups.end());
    Prediction ps;
    run(shifted, ps);
    EXPECT_GT((ps.forces - pg.forces).abs().max().item<double>(), 1e-3 * pg.forces.abs().max().item<double>());
  }
  GroupingRule two;
  two.n_species = 2;
  EXPECT_THROW(group_batch(plain, two), mlip::Error);   // species index 2 of a 2-species model
}

// The training gradient of a force loss (double backward through the model) against finite
// differences of the loss in a few parameters, for both architectures.
TEST(Training, ForceLossGradientMatchesFiniteDifferences) {
  auto frames = read_extxyz(mlip::testing::source_dir() + "/data/ethanol-rmd17/rmd17_ethanol_1000.xyz",
                            ReadOptions{Units{"angstrom", "kcal/mol", ""}, {}});
  std::vector<Frame> batch_frames = {make_frame(frames[0], 4.0), make_frame(frames[500], 4.0)};
  const SpeciesMap species({"H", "C", "O"});
  const GraphBatch gb = make_batch({&batch_frames[0], &batch_frames[1]}, species);
  for (const std::string arch : {"se_e2_a", "painn", "mace"}) {
    ModelSpec spec;
    spec.architecture = arch;
    spec.species = {"H", "C", "O"};
    spec.cutoff = 4.0;
    spec.hyperparameters =
        arch == "se_e2_a" ? nlohmann::json{{"embedding", {4, 8}}, {"axis_neurons", 2}, {"fitting", {8, 8}}}
        : arch == "painn" ? nlohmann::json{{"features", 4}, {"layers", 2}, {"radial_basis", 4}}
                          : nlohmann::json{{"num_channels", 4}, {"max_L", 1}, {"max_ell", 2}, {"correlation", 2},
                                           {"radial_MLP", {8}}, {"MLP_irreps", "4x0e"}, {"avg_num_neighbors", 5.0}};
    BuiltModel m = build_model(spec);
    const BatchTensors t = to_tensors(gb, torch::kFloat64);
    auto params = trainable_parameters(m.module);
    auto loss_at = [&](bool backward) {
      const Prediction p = predict(m.module, t, /*create_graph=*/backward);
      // Forces and virials only: the energy term of an unfitted shift would make the loss
      // ~1e5 and the finite differences noisy.
      torch::Tensor l = loss_terms(p, t, {0.0, 1.0, 0.1}, "mse", 0.0, 2.0, nullptr);
      if (backward) l.backward({}, {}, false, params);   // as the trainer: parameters only
      return l.item<double>();
    };
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    loss_at(true);
    int checked = 0;
    for (auto& p : params) {
      ASSERT_TRUE(p.grad().defined()) << arch;
      auto flat = p.view({-1});
      const auto g = p.grad().view({-1});
      for (int64_t k = 0; k < std::min<int64_t>(2, flat.numel()); ++k) {
        const double h = 1e-6, orig = flat[k].item<double>();
        {
          torch::NoGradGuard ng;  // perturbing a weight
          flat[k] = orig + h;
        }
        const double up = loss_at(false);
        {
          torch::NoGradGuard ng;
          flat[k] = orig - h;
        }
        const double down = loss_at(false);
        {
          torch::NoGradGuard ng;
          flat[k] = orig;
        }
        const double fd = (up - down) / (2 * h);
        EXPECT_NEAR(g[k].item<double>(), fd, 1e-6 + 1e-5 * std::abs(fd)) << arch << " param entry " << k;
        ++checked;
      }
    }
    EXPECT_GT(checked, 10);
  }
}

// training.cuda_graph: a grouped batch padded to a capacity (padding atoms, edges beyond the
// cutoff, frames of weight zero) gives the unpadded batch's loss, metric sums and parameter
// gradients, with the loss weights as device tensors, also with the ZBL prior felt by some edges;
// a smaller batch padded into the same tensors afterwards (stale entries overwritten) gives its own.
TEST(Training, PaddedBatchesGiveTheGroupedLossAndGradients) {
  const std::vector<Frame> fs3 = three_ethanols();
  const SpeciesMap species({"H", "C", "O"});
  for (const auto& [one_side, zbl] : {std::pair{true, false}, {false, false}, {false, true}}) {
    SCOPED_TRACE(std::string(one_side ? "one net per neighbour species" : "one net per species pair") +
                 (zbl ? ", ZBL prior" : ""));
    BuiltModel m = small_se_e2_a(one_side, zbl);
    const GroupingRule rule = small_se_e2_a_rule(one_side);
    auto params = trainable_parameters(m.module);
    const Prefactors pre{1.0, 1.0, 0.1};
    const auto gradients = [&](const torch::Tensor& loss) {
      std::vector<torch::Tensor> g;
      for (const auto& x : torch::autograd::grad({loss}, params, {}, false, false, true)) g.push_back(x);
      return g;
    };
    BatchCapacity cap;
    BatchTensors padded;
    for (const std::size_t n : {std::size_t{3}, std::size_t{1}}) {
      std::vector<const Frame*> use;
      for (std::size_t k = 0; k < n; ++k) use.push_back(&fs3[k]);
      const BatchTensors grouped = group_batch(to_tensors(make_batch(use, species), torch::kFloat64), rule);
      const bool grew = fit_capacity(grouped, cap);
      EXPECT_EQ(grew, n == 3);
      pad_batch(grouped, cap, rule.pad_length, padded);
      EXPECT_EQ(padded.n_frames, 8);   // 3 + the padding frame, 10% more, rounded up to 8
      EXPECT_EQ(padded.n_atoms, cap.atoms());
      for (std::size_t s = 0; s < cap.centers.size(); ++s) {
        EXPECT_EQ(cap.centers[s] % 32, 0);
        EXPECT_GT(cap.centers[s], grouped.center_groups[s]);
      }
      MetricSums plain_sums;
      const Prediction pg = predict(m.module, grouped, /*create_graph=*/true);
      const torch::Tensor lg = loss_terms(pg, grouped, pre, "mse", 0.0, 3.0, &plain_sums);
      LossWeights w{torch::tensor({pre.energy, pre.forces, pre.virial}, torch::kFloat64),
                    torch::scalar_tensor(3.0, torch::kFloat64),
                    torch::scalar_tensor(static_cast<double>(n), torch::kFloat64)};
      torch::Tensor terms;
      const Prediction pp = predict(m.module, padded, /*create_graph=*/true);
      const torch::Tensor lp = loss_terms(pp, padded, w, "mse", 0.0, &terms);
      EXPECT_NEAR(lp.item<double>(), lg.item<double>(), 1e-12 * std::abs(lg.item<double>()));
      const std::vector<double> want = plain_sums.pack();
      for (std::size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR(terms[static_cast<int64_t>(i)].item<double>(), want[i], 1e-12 * std::abs(want[i])) << "term " << i;
      EXPECT_TRUE(torch::allclose(pp.energy.narrow(0, 0, static_cast<int64_t>(n)), pg.energy, 1e-12, 1e-12));
      const auto gg = gradients(lg), gp = gradients(lp);
      for (std::size_t i = 0; i < gg.size(); ++i)
        EXPECT_TRUE(torch::allclose(gp[i], gg[i], 1e-10, 1e-12)) << "parameter " << i;
    }
  }
}

// Ethanol's atoms whose element `keep` accepts (a frame lacking species, for the bank's runs).
Frame ethanol_part(const Frame& f, const std::function<bool(int)>& keep) {
  Structure s = f.structure;
  s.positions.clear();
  s.numbers.clear();
  s.forces.clear();
  for (std::size_t i = 0; i < f.structure.size(); ++i) {
    if (!keep(f.structure.numbers[i])) continue;
    s.positions.push_back(f.structure.positions[i]);
    s.numbers.push_back(f.structure.numbers[i]);
    s.forces.push_back(f.structure.forces[i]);
  }
  return make_frame(s, 4.0);
}

// training.cuda_graph with the frames on the device: a batch gathered from the FrameBank is
// bitwise what pad_batch(group_batch(concat(its frames))) makes (and so is a host batch made ready
// by ready_on_host, for the capacity foreseen or a grown one), for one net per neighbour species
// and per species pair, frames lacking species (only H; no O), a virial label, the same capacity
// reused by a smaller batch (stale rows overwritten), rows remade for a grown capacity, and an
// empty batch (a rank with no frames in a step); the bank moved to its device at once and a frame
// at a time.
TEST(Training, FrameBankGathersWhatPaddingTheGroupedBatchGives) {
  std::vector<Frame> frames = three_ethanols();
  frames.push_back(ethanol_part(frames[0], [](int z) { return z == 1; }));
  frames.push_back(ethanol_part(frames[2], [](int z) { return z != 8; }));
  frames[3].structure.virial = Mat3{{{0.5, 0, 0}, {0, 0.5, 0}, {0, 0, 0.5}}};
  const SpeciesMap species({"H", "C", "O"});
  const auto source = memory_source(frames);
  for (const auto& [one_side, piece] : {std::pair{true, int64_t{64} << 20}, {false, int64_t{64} << 20}, {true, int64_t{1}}}) {
    SCOPED_TRACE(one_side ? "one net per neighbour species" : "one net per species pair");
    SCOPED_TRACE(piece == 1 ? "moved a frame at a time" : "moved at once");
    const GroupingRule rule = small_se_e2_a_rule(one_side);
    FrameBank bank(*source, species, torch::kFloat64, rule, torch::kCPU, piece);
    ASSERT_EQ(bank.size(), frames.size());
    BatchCapacity cap;
    BatchTensors padded, gathered;
    const std::vector<std::vector<int64_t>> batches = {{4, 0, 3}, {3}, {}, {2, 1, 0, 4, 3}, {1}};
    for (const std::vector<int64_t>& part : batches) {
      SCOPED_TRACE("batch of " + std::to_string(part.size()) + " frames");
      std::vector<const Frame*> use;
      for (const int64_t k : part) use.push_back(&frames[static_cast<std::size_t>(k)]);
      const BatchTensors grouped = group_batch(to_tensors(make_batch(use, species), torch::kFloat64), rule);
      const BatchCapacity before = cap;
      BankBatch b = bank.batch(part, before);
      EXPECT_EQ(b.shape.center_groups, grouped.center_groups);
      EXPECT_EQ(b.shape.edge_groups, grouped.edge_groups);
      EXPECT_EQ(b.shape.n_atoms, grouped.n_atoms);
      EXPECT_EQ(b.shape.any_virial, grouped.any_virial);
      fit_capacity(grouped, cap);
      EXPECT_TRUE(b.capacity == cap);
      if (part.size() == 1 && part[0] == 1) {
        // rows made for a capacity grown elsewhere (the trainer: a step the prefetcher did not see)
        cap.frames += 2;
        cap.edges.back() += 32;
        bank.make_rows(b, cap);
      }
      pad_batch(grouped, cap, rule.pad_length, padded);
      bank.gather(b, gathered);
      // The same batch made ready on the host (host batches): padded there for the foreseen
      // capacity, or on the device (here the CPU) for the grown one.
      const ReadyBatch on_host = ready_on_host(grouped, before, rule.pad_length, torch::kCPU);
      EXPECT_EQ(on_host.shape.center_groups, grouped.center_groups);
      BatchTensors copied;
      on_host.fill(cap, copied);
      EXPECT_EQ(gathered.n_frames, padded.n_frames);
      EXPECT_EQ(gathered.n_atoms, padded.n_atoms);
      EXPECT_EQ(gathered.any_virial, padded.any_virial);
      EXPECT_EQ(gathered.center_groups, padded.center_groups);
      EXPECT_EQ(gathered.edge_groups, padded.edge_groups);
      EXPECT_FALSE(gathered.head.defined());
      for (std::size_t i = 0; i < BatchTensors::kTensors.size(); ++i) {
        const auto member = BatchTensors::kTensors[i];
        if (member == &BatchTensors::head) continue;
        const torch::Tensor &want = padded.*member, &got = gathered.*member;
        ASSERT_TRUE(got.defined()) << "tensor " << i;
        EXPECT_EQ(got.scalar_type(), want.scalar_type()) << "tensor " << i;
        EXPECT_TRUE(torch::equal(got, want)) << "tensor " << i;
        EXPECT_TRUE(torch::equal(copied.*member, want)) << "made ready on the host, tensor " << i;
      }
      EXPECT_EQ(copied.edge_groups, padded.edge_groups);
      // Padding edges join padding atoms (in the padding frame) to themselves, the padding atoms
      // in turn: none takes more than its share (on a GPU its sums would take them in a row).
      const int64_t pad_frame = padded.n_frames - 1;
      const int64_t n_padding = cap.n_edges() - std::accumulate(grouped.edge_groups.begin(), grouped.edge_groups.end(), int64_t{0});
      const torch::Tensor ends = padded.edge_index, edge_frame = padded.frame_of_edge;
      const torch::Tensor is_padding = padded.edge_vectors.select(1, 0).eq(rule.pad_length);
      EXPECT_EQ(is_padding.sum().item<int64_t>(), n_padding);
      EXPECT_TRUE(torch::equal(ends[0].masked_select(is_padding), ends[1].masked_select(is_padding)));
      EXPECT_TRUE(edge_frame.masked_select(is_padding).eq(pad_frame).all().item<bool>());
      const int64_t n_padding_atoms = padded.frame_of_atom.eq(pad_frame).sum().item<int64_t>();
      if (n_padding > 0) {
        ASSERT_GT(n_padding_atoms, 1);
        const torch::Tensor per_atom = torch::bincount(ends[0].masked_select(is_padding), {}, padded.n_atoms);
        EXPECT_EQ(per_atom.max().item<int64_t>(), (n_padding + n_padding_atoms - 1) / n_padding_atoms);
      }
    }
  }
  // Every species' group keeps a free slot, also when a batch's count reaches the capacity an
  // earlier one set (the last atom is then still a padding atom).
  BatchCapacity cap;
  BatchTensors shape;
  shape.n_frames = 1;
  shape.edge_groups = {0, 0, 0};
  shape.center_groups = {0, 0, 1};
  fit_capacity(shape, cap);
  // (every group as large as the largest: that adds fewer than kEqualCenterGroupsSlack atoms)
  EXPECT_EQ(cap.centers, (std::vector<int64_t>{32, 32, 32}));
  shape.center_groups = {0, 0, 32};
  EXPECT_TRUE(fit_capacity(shape, cap));
  EXPECT_GT(cap.centers[2], 32);
  EXPECT_EQ(cap.centers[0], cap.centers[2]);
  // Groups are made equal only where they then hold at most kEqualCenterGroupsSlack padding atoms.
  shape.edge_groups = {0, 0};
  for (const auto& [counts, equal] : {std::pair{std::vector<int64_t>{100, 200}, true}, {{1, 2000}, false},
                                      {{600, 1200}, true}, {{1000, 2000}, false}}) {
    BatchCapacity c;
    shape.center_groups = counts;
    fit_capacity(shape, c);
    std::vector<int64_t> own;   // each group's capacity by the growth rule alone
    grow_capacities(counts, own, /*spare=*/true);
    const int64_t largest = std::max(own[0], own[1]);
    const std::vector<int64_t> want = equal ? std::vector<int64_t>{largest, largest} : own;
    EXPECT_EQ(c.centers, want) << counts[0] << ", " << counts[1];
    EXPECT_EQ(equal, 2 * largest - counts[0] - counts[1] <= kEqualCenterGroupsSlack);
  }
  // Growing batch after batch, the small group's padding does not pile up past the slack: it was
  // made equal only while the padding was within it, and stays as it was once the groups part.
  BatchCapacity grown;
  for (const int64_t n : {100, 200, 400, 800, 1600, 3000, 6000}) {
    shape.center_groups = {10, n};
    fit_capacity(shape, grown);
    EXPECT_LE(grown.centers[0] - 10, kEqualCenterGroupsSlack) << n;
    EXPECT_GT(grown.centers[1], n);
  }
  EXPECT_LT(grown.centers[0], grown.centers[1]);
}

// training.data_on_device with the recorded step, and the frame bank running out of GPU memory
// while it is built: under auto the training batches are copied per step instead (the log says
// why); under true an error says what to set; other errors pass on.
TEST(Training, AFrameBankOutOfGpuMemoryFallsBackUnderAuto) {
  const std::function<std::unique_ptr<FrameBank>()> out_of_memory = []() -> std::unique_ptr<FrameBank> {
    TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 2.00 GiB (test)");
  };
  std::string why;
  EXPECT_EQ(bank_or_none(out_of_memory, "auto", "train.yaml", why), nullptr);
  EXPECT_NE(why.find("training.data_on_device auto: the frame bank ran out of GPU memory"), std::string::npos) << why;
  EXPECT_NE(why.find("copied to the device per step instead"), std::string::npos) << why;
  try {
    bank_or_none(out_of_memory, "true", "train.yaml", why);
    ADD_FAILURE() << "no error under true";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("train.yaml: training.data_on_device true: the frame bank ran out of GPU memory"),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("set training.data_on_device auto or false"), std::string::npos) << e.what();
  }
  const std::function<std::unique_ptr<FrameBank>()> other = []() -> std::unique_ptr<FrameBank> {
    throw Error("frame 3: a bad label");
  };
  EXPECT_THROW(bank_or_none(other, "auto", "train.yaml", why), Error);
}

// A rank of `size` whose all-reduces of doubles keep what they were given and add, call after
// call, `others`' entries (the other ranks' parts of each sum; none past them), for collectives
// tested in one process.
class OtherRanks final : public Communicator {
 public:
  OtherRanks(int rank, int size, std::vector<std::vector<double>> others)
      : rank_(rank), size_(size), others_(std::move(others)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "test"; }
  void allreduce_sum(torch::Tensor&) override { ADD_FAILURE() << "a tensor all-reduce"; }
  void allreduce_sum(double* data, std::size_t n) override {
    given.emplace_back(data, data + n);
    if (given.size() > others_.size()) return;
    const std::vector<double>& add = others_[given.size() - 1];
    ASSERT_EQ(add.size(), n) << "all-reduce " << given.size();
    for (std::size_t i = 0; i < n; ++i) data[i] += add[i];
  }
  void allreduce_sum(float*, std::size_t) override { ADD_FAILURE() << "a float all-reduce"; }
  void broadcast(std::string&) override {}
  void barrier() override {}
  std::vector<std::vector<double>> given;

 private:
  int rank_, size_;
  std::vector<std::vector<double>> others_;
};

// training.cuda_graph on several ranks: every rank grows its recorded step to the largest of the
// ranks' capacities, entry by entry (so that they record anew together and replay one shape), in
// one all-reduce; ranks whose batches are grouped otherwise are an error on every rank (checked
// once, at setup).
TEST(Training, RanksAgreeOnTheLargestCapacity) {
  std::vector<BatchCapacity> caps(3);
  caps[0].frames = 8, caps[0].centers = {32, 0, 64}, caps[0].edges = {320, 0, 96};
  caps[1].frames = 16, caps[1].centers = {64, 32, 0}, caps[1].edges = {96, 640, 0}, caps[1].virial = true;
  caps[2].frames = 8, caps[2].centers = {0, 0, 0}, caps[2].edges = {0, 0, 0};   // a rank with no frames yet
  // Each rank's part of the sum (its row), the other rows left zero.
  std::vector<std::vector<double>> part(3);
  for (int k = 0; k < 3; ++k) {
    OtherRanks alone(k, 3, {});
    EXPECT_TRUE(largest_over_ranks(alone, caps[static_cast<std::size_t>(k)]) == caps[static_cast<std::size_t>(k)]);
    ASSERT_EQ(alone.given.size(), 1u);
    part[static_cast<std::size_t>(k)] = alone.given[0];
  }
  BatchCapacity want;
  want.frames = 16, want.centers = {64, 32, 64}, want.edges = {320, 640, 96}, want.virial = true;
  for (int k = 0; k < 3; ++k) {
    std::vector<double> others(part[0].size(), 0.0);
    for (int j = 0; j < 3; ++j)
      for (std::size_t i = 0; j != k && i < others.size(); ++i) others[i] += part[static_cast<std::size_t>(j)][i];
    OtherRanks rank(k, 3, {others});
    EXPECT_TRUE(largest_over_ranks(rank, caps[static_cast<std::size_t>(k)]) == want) << "rank " << k;
  }
  BatchCapacity raised = caps[2];
  raise_capacity(raised, caps[0]);
  EXPECT_TRUE(raised == caps[0]);
  // The group counts: the other ranks' (3 species, 3 nets, or another rule's 2 and 2) in the sum.
  const auto groups_of_others = [](int k, int ranks, double species, double nets) {
    std::vector<double> v(static_cast<std::size_t>(2 * ranks), 0.0);
    for (int r = 0; r < ranks; ++r)
      if (r != k) v[static_cast<std::size_t>(2 * r)] = species, v[static_cast<std::size_t>(2 * r + 1)] = nets;
    return v;
  };
  OtherRanks same(1, 3, {groups_of_others(1, 3, 3, 3)});
  EXPECT_NO_THROW(check_groups_agree(same, 3, 3));
  OtherRanks mixed(0, 2, {groups_of_others(0, 2, 2, 2)});
  try {
    check_groups_agree(mixed, 3, 3);
    ADD_FAILURE() << "no error for ranks grouped otherwise";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rank 1's batches are grouped otherwise (2 species, 2 nets) than rank 0's"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(mixed.given.size(), 1u);
}

// The prefetching thread's operators run as a team of one on the CPU, beside the step's threads,
// which keep their count, as do threads started later: a team as large as the step's would stall
// it on cores its threads fill (mlip/model/runtime.h, use_one_thread_here).
TEST(Training, ThePrefetchingThreadRunsItsOperatorsOnOneThread) {
  bool openmp = false;   // whether mlip can set a thread's own count (built with OpenMP)
  std::thread([&openmp] { openmp = use_one_thread_here(); }).join();
  if (!openmp) GTEST_SKIP() << "mlip was built without OpenMP: its background threads keep LibTorch's count";
  const int before = at::get_num_threads();
  at::set_num_threads(2);
  std::vector<int> seen;   // written by the prefetching thread, read after it is joined
  {
    BatchPrefetcher batches(3, [](std::size_t k) { return std::vector<int64_t>{static_cast<int64_t>(k)}; },
                            [&seen](const std::vector<int64_t>&) {
                              // an operator of mlip's first (its files' parallel_for: their own
                              // first-use flag, whose setup must not undo the thread's count)
                              (void)scaled_silu(torch::ones({64}, torch::kFloat64), 1.0);
                              seen.push_back(at::get_num_threads());
                              return BatchTensors{};
                            }, /*depth=*/2);
    for (int k = 0; k < 3; ++k) batches.next();
  }
  EXPECT_EQ(seen, std::vector<int>(3, 1));
  EXPECT_EQ(at::get_num_threads(), 2);
  int later = 0;
  std::thread([&later] { later = at::get_num_threads(); }).join();
  EXPECT_EQ(later, 2);
  at::set_num_threads(before);
}

// What the bank is for: a 16-frame batch gathered from it takes a few operators (on a GPU each a
// kernel launch the host pays), where concat, group_batch and pad_batch of the frames' tensors
// take many times as many (counted by LibTorch's profiler, views and allocations included).
TEST(Training, FrameBankGathersABatchInFewOperators) {
  const auto read = read_extxyz(mlip::testing::source_dir() + "/data/ethanol-rmd17/rmd17_ethanol_1000.xyz",
                                ReadOptions{Units{"angstrom", "kcal/mol", ""}, {}});
  std::vector<Frame> frames;
  for (std::size_t k = 0; k < 16; ++k) frames.push_back(make_frame(read[k * 50], 4.0));
  const SpeciesMap species({"H", "C", "O"});
  const GroupingRule rule = small_se_e2_a_rule(false);
  FrameBank bank(*memory_source(frames), species, torch::kFloat64, rule, torch::kCPU);
  EXPECT_THROW(bank.batch({1, 2, 1}, BatchCapacity{}), mlip::Error);   // a frame twice in a batch
  std::vector<BatchTensors> one;
  for (const Frame& f : frames) one.push_back(to_tensors(make_batch({&f}, species), torch::kFloat64));
  std::vector<int64_t> part;
  std::vector<const BatchTensors*> parts;
  for (int64_t k = 0; k < 16; ++k) {
    part.push_back(k);
    parts.push_back(&one[static_cast<std::size_t>(k)]);
  }
  BatchCapacity cap;
  fit_capacity(group_batch(concat(parts), rule), cap);
  BatchTensors padded, gathered;
  pad_batch(group_batch(concat(parts), rule), cap, rule.pad_length, padded);   // the tensors made once
  BankBatch b = bank.batch(part, cap);
  bank.gather(b, gathered);
  const auto operators = [](const std::function<void()>& work) {
    mlip::KernelProfile profile(torch::kCPU);
    work();
    int64_t n = 0;
    for (const mlip::ProfileRow& r : profile.stop().rows) n += r.kind == "operator" ? r.calls : 0;
    return n;
  };
  const int64_t before = operators([&] { pad_batch(group_batch(concat(parts), rule), cap, rule.pad_length, padded); });
  const int64_t now = operators([&] { bank.gather(b, gathered); });
  std::printf("operators for a padded batch of 16 frames: %ld by concat, group_batch and pad_batch; %ld by the bank\n",
              static_cast<long>(before), static_cast<long>(now));
  EXPECT_LT(now * 4, before);
  for (std::size_t i = 0; i < BatchTensors::kTensors.size(); ++i) {
    const auto member = BatchTensors::kTensors[i];
    if (member != &BatchTensors::head) {
      EXPECT_TRUE(torch::equal(gathered.*member, padded.*member)) << "tensor " << i;
    }
  }
}

// The recorded step sets each parameter's .grad from autograd::grad, whose backward of a sum
// passes one tensor on to each term: each parameter must get its own, or clipping (an in-place
// scaling of each gradient) scales a shared one twice. Distinct gradients are not copied.
TEST(Training, EachParameterGetsItsOwnGradient) {
  torch::Tensor a = torch::ones({3}, torch::kFloat64).requires_grad_(), b = torch::ones({3}, torch::kFloat64).requires_grad_();
  std::vector<torch::Tensor> params{a, b};
  const torch::Tensor w = torch::full({3}, 2.0, torch::kFloat64);   // a gradient laid out as the parameters (not expanded)
  std::vector<torch::Tensor> grads = torch::autograd::grad({((a + b) * w).sum()}, params);
  if (grads[0].data_ptr() != grads[1].data_ptr()) std::printf("note: this LibTorch gave the terms of a sum distinct gradients\n");
  grads[1] = grads[0];   // the case guarded against, whatever this LibTorch's autograd does
  set_gradients(params, grads);
  EXPECT_NE(a.grad().data_ptr(), b.grad().data_ptr());
  at::_foreach_mul_(std::vector<torch::Tensor>{a.grad(), b.grad()}, torch::full({}, 0.5, torch::kFloat64));
  EXPECT_TRUE(torch::equal(a.grad(), torch::ones({3}, torch::kFloat64))) << a.grad();
  EXPECT_TRUE(torch::equal(b.grad(), torch::ones({3}, torch::kFloat64))) << b.grad();

  std::vector<torch::Tensor> apart = torch::autograd::grad({(a * a).sum() + (3.0 * b).sum()}, params);
  set_gradients(params, apart);
  EXPECT_EQ(a.grad().data_ptr(), apart[0].data_ptr());
  EXPECT_EQ(b.grad().data_ptr(), apart[1].data_ptr());
}

// ema_decay's warm-up: min(decay, (1 + n) / (10 + n)) at update n. After 90 updates of constant
// parameters the average keeps nothing of the initial ones (0.99 alone kept 0.99^90 = 40%), and
// the recorded step's form (1 - decay read from a tensor) updates as the plain step's.
TEST(Training, EmaForgetsTheInitialWeightsInShortRuns) {
  EXPECT_DOUBLE_EQ(ema_decay_at(0.99, 0), 0.1);
  EXPECT_DOUBLE_EQ(ema_decay_at(0.99, 89), 90.0 / 99.0);
  EXPECT_DOUBLE_EQ(ema_decay_at(0.99, 900), 0.99);
  EXPECT_DOUBLE_EQ(ema_decay_at(0.5, 9), 0.5);   // 10 / 19 > 0.5
  const auto opts = torch::TensorOptions().dtype(torch::kFloat64);
  std::vector<torch::Tensor> ema = {torch::zeros({3}, opts)}, tensor_form = {torch::zeros({3}, opts)};
  const std::vector<torch::Tensor> params = {torch::tensor({1.0, -2.0, 4.0}, opts)};
  for (int64_t n = 0; n < 90; ++n) {
    const double d = ema_decay_at(0.99, n);
    update_ema(ema, params, d);
    update_ema(tensor_form, params, torch::tensor(1.0 - d, opts));
  }
  // ema = (1 - w) p, w the weight left on the initial zeros
  const double w = 1.0 - ema[0][0].item<double>();
  EXPECT_LT(std::abs(w), 1e-12) << "the initial weights kept: " << w;
  EXPECT_TRUE(torch::equal(ema[0], tensor_form[0])) << ema[0] << tensor_form[0];
  // parameters that do not move leave their average as it is, bitwise
  std::vector<torch::Tensor> still = {params[0].clone()};
  for (int64_t n = 0; n < 20; ++n) update_ema(still, params, ema_decay_at(0.99, n));
  EXPECT_TRUE(torch::equal(still[0], params[0]));
}

// training.cuda_graph eager (the recorded step run unrecorded, as ctest can): the tiny problem
// trained 3 epochs (batches of 2 frames and a last one of 1, EMA, clipping) ends with the
// parameters of the plain grouped step with the same fused Adam; what cannot be recorded is
// refused with the reason.
TEST(Training, RecordedStepTrainsAsThePlainStep) {
  TempDir dir("mlip_test_recorded_step");
  SerialCommunicator comm;
  std::vector<std::vector<torch::Tensor>> params;
  std::vector<std::vector<std::string>> csv;
  // eager twice: batches from the host, and gathered from the frame bank (the frames "on the device")
  for (const std::string mode : {"false", "eager", "eager-bank"}) {
    const fs::path out = dir.path / ("run-" + mode);
    Config c = read_config(tiny_config(dir, out.string(), 3));
    c.grouped = true;
    c.fused = "true";
    c.grad_clip = 0.05;   // clips some steps of this problem
    c.cuda_graph = mode == "false" ? "false" : "eager";
    if (mode == "eager-bank") c.data_on_device = "true";
    Trainer t(c, "", comm);
    t.run(false);
    EXPECT_EQ(t.state().step, 15);   // 9 training frames: 5 steps an epoch
    params.push_back(checkpoint_parameters(out / "checkpoints" / "epoch-000003"));
    std::ifstream in(out / "metrics.csv");
    std::vector<std::string> lines;
    for (std::string line; std::getline(in, line);) lines.push_back(line.substr(0, line.find(",", line.find(",") + 1)));
    csv.push_back(lines);
  }
  for (std::size_t run = 1; run < params.size(); ++run) {
    ASSERT_EQ(params[0].size(), params[run].size());
    for (std::size_t i = 0; i < params[0].size(); ++i)
      EXPECT_TRUE(torch::allclose(params[run][i], params[0][i], 1e-10, 1e-12)) << "run " << run << " parameter " << i;
    EXPECT_EQ(csv[0], csv[run]);   // epochs and steps
  }
  // The bank's batches are bitwise the host's padded ones.
  for (std::size_t i = 0; i < params[1].size(); ++i) EXPECT_TRUE(torch::equal(params[2][i], params[1][i])) << "parameter " << i;
  const auto refused = [&](const std::function<void(Config&)>& change, const std::string& why) {
    Config c = read_config(tiny_config(dir, (dir.path / "refused").string(), 1));
    c.cuda_graph = "eager";
    change(c);
    try {
      Trainer t(c, "", comm);
      t.run(false);
      ADD_FAILURE() << "no error: " << why;
    } catch (const mlip::Error& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused([](Config& c) { c.accumulate = 2; }, "takes one batch a step; data.batch.accumulate is 2");
  refused([](Config& c) { c.fused = "false"; }, "takes the fused Adam step");
  refused([](Config& c) { c.cuda_graph = "true"; c.device = "cpu"; }, "needs a GPU");
  refused([](Config& c) {
    c.model.architecture = "painn";
    c.model.hyperparameters = {{"features", 4}, {"layers", 2}, {"radial_basis", 4}};
  }, "training.cuda_graph needs a model with forward_grouped()");
}

// training.cuda_graph: a run stopped and resumed pads its batches to the capacities the checkpoint
// kept (state.json's batch_capacity), not to ones grown anew from the first batches after it, so that
// it ends bitwise as the run that was not stopped (eager here, as on a GPU the recorded step: other
// padded shapes give the matrix products' sums another rounding).
TEST(Checkpoint, RecordedStepResumesAtItsCapacities) {
  TempDir dir("mlip_test_recorded_resume");
  SerialCommunicator comm;
  const auto config = [&](const std::string& out) {
    Config c = read_config(tiny_config(dir, (dir.path / out).string(), 3));
    c.cuda_graph = "eager";
    c.fused = "true";
    c.grad_clip = 0.05;
    return c;
  };
  Trainer full(config("full"), "", comm);
  full.run(false);
  Trainer first(config("split"), "", comm);
  first.run(false, /*stop_after_epochs=*/2);
  const auto saved = nlohmann::json::parse(std::ifstream(dir.path / "split" / "checkpoints" / "epoch-000002" / "state.json"));
  ASSERT_TRUE(saved.contains("batch_capacity"));
  EXPECT_EQ(saved["batch_capacity"]["frames"].get<int64_t>(), first.step_capacity()->frames);
  EXPECT_EQ(saved["batch_capacity"]["edges"].get<std::vector<int64_t>>(), first.step_capacity()->edges);
  Trainer resumed(config("split"), "", comm);
  ::testing::internal::CaptureStdout();
  resumed.run(true);
  const std::string printed = ::testing::internal::GetCapturedStdout();
  // The checkpoint's capacities hold every batch of the last epoch: the resumed step never grows.
  EXPECT_EQ(printed.find("training.cuda_graph: step"), std::string::npos) << printed;
  ASSERT_NE(resumed.step_capacity(), nullptr);
  EXPECT_TRUE(*resumed.step_capacity() == *full.step_capacity());
  const auto a = checkpoint_parameters(dir.path / "full" / "checkpoints" / "epoch-000003");
  const auto b = checkpoint_parameters(dir.path / "split" / "checkpoints" / "epoch-000003");
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
}

}  // namespace
}  // namespace mlip::trainer
