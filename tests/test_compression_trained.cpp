// Compressed se_e2_a against its uncompressed self on a trained water model of the benchmarks'
// size. Its own executable, because its 216 float64 training steps take minutes on 2 cores: ctest
// runs it alone (PROCESSORS 2), so that no other test's threads share its cores.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "communicator.h"
#include "config.h"
#include "mlip/data/io.h"
#include "support/reference.h"
#include "support/source_dir.h"
#include "support/temp_dir.h"
#include "training.h"

namespace mlip::trainer {
namespace {

using testing::TempDir;

// Compression where the docs claim its accuracy (docs/models.md): a water model of the size the
// benchmarks run (rc 6 A, embedding 25-50-100, axis 16, fitting 240x3, float64), trained for 3
// epochs on data_0 (216 steps: weights well away from their random start), compressed in float64
// and in float32 (export --compress [--dtype float32]), against its uncompressed self on frames
// it never saw (data_2) and distortions of them (atoms moved by up to 0.1 A; the box and the
// atoms scaled by 0.97 and 1.03). The tolerances asserted are the ones docs/models.md states.
TEST(Compression, TrainedWaterModelOfTheBenchmarkSize) {
  TempDir dir("mlip_test_compression_trained");
  const std::string water = mlip::testing::source_dir() + "/data/water-deepmd";
  const std::string config = dir.file("water.yaml", R"(model:
  architecture: se_e2_a
  species: [O, H]
  cutoff: 6.0
  dtype: float64
  hyperparameters: {embedding: [25, 50, 100], axis_neurons: 16, fitting: [240, 240, 240]}
data:
  train: [)" + water + R"(/data_0]
  validation_fraction: 0.1
  cache_dir: )" + (dir.path / "cache").string() + R"(
  batch: {frames: 1}
training:
  epochs: 3
  optimizer: {type: adam, lr: 0.001}
output:
  dir: )" + (dir.path / "run").string() + R"(
  log_every: 0
)");
  SerialCommunicator comm;
  Trainer t(read_config(config), "", comm);
  t.run(false);
  const std::string best = (dir.path / "run" / "checkpoints" / "best").string();
  const std::string f64 = (dir.path / "f64.pt").string(), c64 = (dir.path / "c64.pt").string(),
                    c32 = (dir.path / "c32.pt").string();
  export_checkpoint(best, f64, {});
  ExportOptions compressed;
  compressed.compress = true;
  export_checkpoint(best, c64, {}, compressed);
  compressed.dtype = "float32";
  export_checkpoint(best, c32, {}, compressed);
  const Model plain = Model::load(f64), comp64 = Model::load(c64), comp32 = Model::load(c32);

  std::vector<Structure> frames;
  const std::vector<Structure> held_out = read_deepmd(water + "/data_2");
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> shift(-0.1, 0.1);
  for (int k : {0, 39, 79}) {
    frames.push_back(held_out.at(k));
    Structure moved = held_out.at(k);
    for (auto& x : moved.positions)
      for (double& v : x) v += shift(rng);
    frames.push_back(moved);
    for (double scale : {0.97, 1.03}) {
      Structure scaled = held_out.at(k);
      for (auto& x : scaled.positions)
        for (double& v : x) v *= scale;
      for (auto& row : scaled.cell.lattice)
        for (double& v : row) v *= scale;
      frames.push_back(scaled);
    }
  }
  double df64 = 0, de64 = 0, df32 = 0, de32 = 0, fmax = 0;
  // NaN-safe: a difference that is not <= the largest so far (a NaN too) becomes the largest.
  auto grow = [](double& largest, double d) {
    if (!(d <= largest)) largest = d;
  };
  for (const Structure& s : frames) {
    const auto ref = mlip::testing::evaluate_reference(plain, s);
    const auto a = mlip::testing::evaluate_reference(comp64, s);
    const auto b = mlip::testing::evaluate_reference(comp32, s);
    double e_ref = 0, e_a = 0, e_b = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      e_ref += ref.atom_energy[i];
      e_a += a.atom_energy[i];
      e_b += b.atom_energy[i];
      for (int d = 0; d < 3; ++d) {
        grow(fmax, std::abs(ref.forces[i][d]));
        grow(df64, std::abs(a.forces[i][d] - ref.forces[i][d]));
        grow(df32, std::abs(b.forces[i][d] - ref.forces[i][d]));
      }
    }
    const double n = static_cast<double>(s.size());
    grow(de64, std::abs(e_a - e_ref) / n);
    grow(de32, std::abs(e_b - e_ref) / n);
  }
  std::printf("[ compression ] trained water model, 25-50-100 / 16 / 240x3, %zu frames, largest force %.3g eV/A: "
              "float64 max |dF| %.2e eV/A, |dE| %.2e eV/atom; float32 max |dF| %.2e eV/A, |dE| %.2e eV/atom\n",
              frames.size(), fmax, df64, de64, df32, de32);
  EXPECT_GT(fmax, 0.5) << "the model's forces must be those of a trained water model";
  EXPECT_LE(df64, 1e-9);   // docs/models.md: float64 forces within 1e-9 eV/A, energies 1e-10 eV/atom
  EXPECT_LE(de64, 1e-10);
  EXPECT_LE(df32, 2e-4);   // docs/models.md: float32 forces within 2e-4 eV/A, energies 1e-5 eV/atom
  EXPECT_LE(de32, 1e-5);
}

}  // namespace
}  // namespace mlip::trainer
