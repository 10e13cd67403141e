// Frames with neighbour lists, the binary cache (hit, invalidation on data/cutoff change,
// corrupted cache rebuilt) and batches of frames as one graph.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include "mlip/data/dataset.h"
#include "mlip/error.h"
#include "support/temp_dir.h"

namespace mlip {
namespace {

namespace fs = std::filesystem;

std::vector<Structure> sample_frames() {
  std::vector<Structure> frames;
  for (int k = 0; k < 3; ++k) {
    Structure s;
    s.cell.lattice = {{{6.0 + k, 0, 0}, {0.5, 6.0, 0}, {0, 0.3, 7.0}}};
    s.cell.pbc = {true, true, k != 2};
    s.positions = {{0.1, 0.2, 0.3}, {1.2, 0.1, 0.4}, {0.3, 1.5, 0.2}, {3.0, 3.1, 3.2 + 0.1 * k}};
    s.numbers = {8, 1, 1, 8};
    s.energy = -10.0 - k;
    s.forces = {{0.1, 0, 0}, {0, 0.2, 0}, {0, 0, 0.3}, {-0.1, -0.2, -0.3}};
    if (k == 1) s.virial = Mat3{{{1, 2, 3}, {2, 4, 5}, {3, 5, 6}}};
    s.weight = 1.0 + k;
    frames.push_back(s);
  }
  return frames;
}

using testing::TempDir;

void expect_same(const std::vector<Frame>& a, const std::vector<Frame>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t k = 0; k < a.size(); ++k) {
    EXPECT_EQ(a[k].structure.positions, b[k].structure.positions);
    EXPECT_EQ(a[k].structure.numbers, b[k].structure.numbers);
    EXPECT_EQ(a[k].structure.cell.lattice, b[k].structure.cell.lattice);
    EXPECT_EQ(a[k].structure.cell.pbc, b[k].structure.cell.pbc);
    EXPECT_EQ(a[k].structure.energy, b[k].structure.energy);
    EXPECT_EQ(a[k].structure.forces, b[k].structure.forces);
    EXPECT_EQ(a[k].structure.virial, b[k].structure.virial);
    EXPECT_EQ(a[k].structure.weight, b[k].structure.weight);
    EXPECT_EQ(a[k].structure.origin, b[k].structure.origin);
    EXPECT_EQ(a[k].centers, b[k].centers);
    EXPECT_EQ(a[k].neighbors, b[k].neighbors);
    EXPECT_EQ(a[k].shifts, b[k].shifts);
  }
}

TEST(Dataset, CacheIsUsedAndInvalidated) {
  TempDir dir("mlip_test_dataset");
  const std::string data = (dir.path / "frames.xyz").string();
  write_extxyz(data, sample_frames());
  DatasetOptions opts;
  opts.cutoff = 3.0;
  opts.cache_dir = (dir.path / "cache").string();

  std::string note;
  const auto fresh = load_frames(data, opts, &note);
  EXPECT_NE(note.find("cache written"), std::string::npos) << note;
  ASSERT_EQ(fresh.size(), 3u);
  EXPECT_GT(fresh[0].num_edges(), 0u);

  const auto cached = load_frames(data, opts, &note);
  EXPECT_NE(note.find("from cache"), std::string::npos) << note;
  expect_same(fresh, cached);

  // Another cutoff is another cache entry.
  opts.cutoff = 1.2;
  const auto shorter = load_frames(data, opts, &note);
  EXPECT_NE(note.find("cache written"), std::string::npos) << note;
  EXPECT_LT(shorter[0].num_edges(), fresh[0].num_edges());

  // Changed data invalidates the cache even with the same size.
  opts.cutoff = 3.0;
  auto changed = sample_frames();
  changed[0].energy = -10.5;
  write_extxyz(data, changed);
  const auto reread = load_frames(data, opts, &note);
  EXPECT_NE(note.find("cache written"), std::string::npos) << note;
  EXPECT_EQ(*reread[0].structure.energy, -10.5);
}

TEST(Dataset, CorruptedCacheIsRebuiltNotTrusted) {
  TempDir dir("mlip_test_dataset_corrupt");
  const std::string data = (dir.path / "frames.xyz").string();
  write_extxyz(data, sample_frames());
  DatasetOptions opts;
  opts.cutoff = 3.0;
  opts.cache_dir = (dir.path / "cache").string();
  const auto fresh = load_frames(data, opts);
  for (const auto& e : fs::directory_iterator(opts.cache_dir)) {
    fs::resize_file(e.path(), fs::file_size(e.path()) / 2);  // truncate it
  }
  std::string note;
  const auto rebuilt = load_frames(data, opts, &note);
  EXPECT_NE(note.find("truncated cache; rebuilding"), std::string::npos) << note;
  expect_same(fresh, rebuilt);
}

TEST(Dataset, BatchConcatenatesFramesIntoOneGraph) {
  std::vector<Frame> frames;
  for (auto& s : sample_frames()) frames.push_back(make_frame(s, 3.0));
  const SpeciesMap species({"H", "O"});
  const GraphBatch b = make_batch({&frames[0], &frames[1], &frames[2]}, species);
  EXPECT_EQ(b.num_frames, 3);
  EXPECT_EQ(b.num_atoms, 12);
  EXPECT_EQ(b.atom_offset, (std::vector<int64_t>{0, 4, 8, 12}));
  EXPECT_EQ(b.species[0], 1);  // O
  EXPECT_EQ(b.species[1], 0);  // H
  EXPECT_EQ(b.frame_of_atom[5], 1);
  int64_t edges = 0;
  for (const auto& f : frames) edges += static_cast<int64_t>(f.num_edges());
  ASSERT_EQ(b.num_edges, edges);
  for (int64_t e = 0; e < b.num_edges; ++e) {
    const int64_t i = b.edge_index[e], j = b.edge_index[b.num_edges + e];
    EXPECT_EQ(b.frame_of_atom[i], b.frame_of_atom[j]) << "edges never cross frames";
    const double r = std::sqrt(b.edge_vectors[3 * e] * b.edge_vectors[3 * e] +
                               b.edge_vectors[3 * e + 1] * b.edge_vectors[3 * e + 1] +
                               b.edge_vectors[3 * e + 2] * b.edge_vectors[3 * e + 2]);
    EXPECT_LT(r, 3.0);
    EXPECT_GT(r, 0.5);
  }
  EXPECT_EQ(b.has_virial, (std::vector<uint8_t>{0, 1, 0}));
  EXPECT_EQ(b.virial[9 + 4], 4.0);
  EXPECT_EQ(b.weight, (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(b.forces[3 * 5 + 1], 0.2);
}

TEST(Dataset, UnknownSpeciesNamesFrameAndElement) {
  Frame f = make_frame(sample_frames()[0], 3.0);
  f.structure.origin = "water.xyz:frame 7";
  try {
    make_batch({&f}, SpeciesMap({"H"}));
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("water.xyz:frame 7: element O is not among the model's species (H)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace mlip
