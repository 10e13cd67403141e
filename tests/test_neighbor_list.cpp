// Neighbour lists against a brute-force search on random cells: orthogonal, triclinic, strongly
// skewed, mixed and no periodicity, cutoffs beyond half a cell width, unwrapped coordinates.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <tuple>

#include <nlohmann/json.hpp>

#include "mlip/error.h"
#include "mlip/graph/neighbor_list.h"
#include "support/source_dir.h"

namespace mlip {
namespace {

using Edge = std::tuple<int64_t, int64_t, int32_t, int32_t, int32_t>;

std::vector<Edge> edges(const NeighborList& nl) {
  std::vector<Edge> out;
  for (std::size_t e = 0; e < nl.size(); ++e) {
    out.emplace_back(nl.centers[e], nl.neighbors[e], nl.shifts[e][0], nl.shifts[e][1], nl.shifts[e][2]);
  }
  return out;
}

// Random atoms in a cell, pushed out of it by up to `spill` cells in random directions.
Structure random_structure(std::mt19937& rng, const Mat3& lattice, std::array<bool, 3> pbc, int n,
                           double spill, double min_sep = 0.3) {
  std::uniform_real_distribution<double> u(0.0, 1.0), w(-spill, 1.0 + spill);
  Structure s;
  s.cell.lattice = lattice;
  s.cell.pbc = pbc;
  s.origin = "random";
  while (static_cast<int>(s.size()) < n) {
    const Vec3 f = {w(rng), w(rng), w(rng)};
    Vec3 x{};
    for (int d = 0; d < 3; ++d) x[d] = f[0] * lattice[0][d] + f[1] * lattice[1][d] + f[2] * lattice[2][d];
    bool ok = true;
    for (const auto& y : s.positions) {
      const Vec3 r = {x[0] - y[0], x[1] - y[1], x[2] - y[2]};
      ok = ok && norm(r) > min_sep;
    }
    if (!ok) continue;
    s.positions.push_back(x);
    s.numbers.push_back(1 + static_cast<int>(u(rng) * 3));
  }
  return s;
}

void expect_same_as_brute_force(const Structure& s, double cutoff) {
  NeighborOptions opts;
  opts.min_distance = 0.0;
  const NeighborList fast = build_neighbor_list(s, cutoff, opts);
  const NeighborList ref = build_neighbor_list_brute_force(s, cutoff);
  ASSERT_EQ(fast.size(), ref.size());
  EXPECT_EQ(edges(fast), edges(ref));
  for (std::size_t e = 0; e < fast.size(); ++e) {
    for (int d = 0; d < 3; ++d) EXPECT_NEAR(fast.vectors[e][d], ref.vectors[e][d], 1e-12);
    EXPECT_LT(norm(fast.vectors[e]), cutoff);
  }
}

TEST(NeighborList, OrthogonalPeriodicMatchesBruteForce) {
  std::mt19937 rng(1);
  const Mat3 L = {{{9.0, 0, 0}, {0, 10.0, 0}, {0, 0, 11.0}}};
  const Structure s = random_structure(rng, L, {true, true, true}, 120, 0.0);
  expect_same_as_brute_force(s, 3.5);
}

TEST(NeighborList, RandomTriclinicCellsMatchBruteForce) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<double> len(4.0, 9.0), tilt(-3.0, 3.0), cut(1.5, 7.0);
  for (int trial = 0; trial < 20; ++trial) {
    const Mat3 L = {{{len(rng), 0, 0}, {tilt(rng), len(rng), 0}, {tilt(rng), tilt(rng), len(rng)}}};
    const Structure s = random_structure(rng, L, {true, true, true}, 30, 0.5);
    SCOPED_TRACE("trial " + std::to_string(trial));
    expect_same_as_brute_force(s, cut(rng));
  }
}

TEST(NeighborList, StronglySkewedCell) {
  std::mt19937 rng(3);
  // b is tilted by more than twice |a|: plane widths differ greatly from vector lengths.
  const Mat3 L = {{{5.0, 0, 0}, {12.0, 4.0, 0}, {-9.0, 7.0, 4.5}}};
  const Structure s = random_structure(rng, L, {true, true, true}, 40, 1.0);
  expect_same_as_brute_force(s, 5.0);
}

TEST(NeighborList, CutoffLargerThanCellSeesManyImages) {
  std::mt19937 rng(4);
  const Mat3 L = {{{3.0, 0, 0}, {0.5, 3.2, 0}, {0.3, 0.2, 2.9}}};
  const Structure s = random_structure(rng, L, {true, true, true}, 3, 0.0);
  expect_same_as_brute_force(s, 7.5);
  // A single atom in a small periodic cell is its own neighbour through its images.
  Structure one;
  one.positions = {{0.1, 0.2, 0.3}};
  one.numbers = {1};
  one.cell.lattice = {{{2.0, 0, 0}, {0, 2.0, 0}, {0, 0, 2.0}}};
  one.cell.pbc = {true, true, true};
  const NeighborList nl = build_neighbor_list(one, 2.1);
  EXPECT_EQ(nl.size(), 6u);  // the six face-sharing images at 2.0 Å
}

TEST(NeighborList, MixedPeriodicity) {
  std::mt19937 rng(5);
  const Mat3 L = {{{6.0, 0, 0}, {1.5, 6.5, 0}, {0.7, -0.4, 9.0}}};
  for (std::array<bool, 3> pbc : {std::array<bool, 3>{true, true, false}, {true, false, false},
                                  {false, true, true}, {false, false, false}}) {
    const Structure s = random_structure(rng, L, pbc, 40, 0.8);
    expect_same_as_brute_force(s, 4.0);
  }
}

TEST(NeighborList, GasPhaseWithoutCell) {
  std::mt19937 rng(6);
  Structure s = random_structure(rng, {{{8, 0, 0}, {0, 8, 0}, {0, 0, 8}}}, {false, false, false}, 25, 0.0);
  s.cell.lattice = {};  // no cell at all
  expect_same_as_brute_force(s, 3.0);
}

TEST(NeighborList, SlabWithZeroVacuumVector) {
  std::mt19937 rng(7);
  Structure s = random_structure(rng, {{{6, 0, 0}, {2, 5, 0}, {0, 0, 8}}}, {true, true, false}, 30, 0.3);
  s.cell.lattice[2] = {0, 0, 0};
  expect_same_as_brute_force(s, 3.7);
}

TEST(NeighborList, SmallAndLargeCellsAtLiquidDensity) {
  // Small cells (the cutoff below half of every width) pair every atom with every other at its
  // nearest image; larger ones go by bins: both give the brute-force edges, and unsorted lists
  // hold the same edges, centre after centre.
  std::mt19937 rng(7);
  for (const int n : {24, 192, 1000}) {
    const double a = std::cbrt(n / 0.1);  // 0.1 atoms per cubic Å
    const Mat3 L = {{{a, 0, 0}, {0.4, a, 0}, {-0.3, 0.2, a}}};
    const Structure s = random_structure(rng, L, {true, true, true}, n, 0.5, 0.9);
    for (const double cutoff : {0.3 * a, 0.49 * a, 4.0}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", cutoff " + std::to_string(cutoff));
      expect_same_as_brute_force(s, cutoff);
      NeighborOptions unsorted;
      unsorted.sort = false;
      unsorted.min_distance = 0.0;
      const NeighborList nl = build_neighbor_list(s, cutoff, unsorted);
      EXPECT_TRUE(std::is_sorted(nl.centers.begin(), nl.centers.end()));
      std::vector<Edge> e = edges(nl);
      std::sort(e.begin(), e.end());
      EXPECT_EQ(e, edges(build_neighbor_list_brute_force(s, cutoff)));
    }
  }
}

TEST(NeighborList, FarApartClustersStayCheap) {
  // Two atoms 10 km apart must not allocate a bin grid spanning the gap.
  Structure s;
  s.positions = {{0, 0, 0}, {1e7, 0, 0}, {0.9, 0, 0}};
  s.numbers = {1, 1, 1};
  const NeighborList nl = build_neighbor_list(s, 2.0);
  EXPECT_EQ(nl.size(), 2u);
}

TEST(NeighborList, EdgeVectorsUseGivenPositionsAndShifts) {
  Structure s;
  s.positions = {{0.5, 0.5, 0.5}, {9.7, 0.5, 0.5}};  // 0.8 Å apart through the x boundary
  s.numbers = {8, 1};
  s.cell.lattice = {{{10, 0, 0}, {0, 10, 0}, {0, 0, 10}}};
  s.cell.pbc = {true, true, true};
  const NeighborList nl = build_neighbor_list(s, 1.0);
  ASSERT_EQ(nl.size(), 2u);
  EXPECT_EQ(nl.centers[0], 0);
  EXPECT_EQ(nl.shifts[0], (std::array<int32_t, 3>{-1, 0, 0}));
  EXPECT_NEAR(nl.vectors[0][0], -0.8, 1e-12);
  EXPECT_NEAR(nl.vectors[1][0], 0.8, 1e-12);
}

// The all-pairs search decides each pair once, from its lower atom: the error must still name the
// first overlapping pair in (centre, neighbour) order, as a search of every direction would.
TEST(NeighborList, FirstOverlapInCentreOrderFromPairs) {
  Structure s;
  for (int k = 0; k < 8; ++k) s.positions.push_back({1.5 * k, 0.3 * k, 0.1});
  s.positions[5] = {s.positions[3][0] + 0.05, s.positions[3][1], 0.1};  // 3 and 5 overlap
  s.positions[4] = {s.positions[1][0], s.positions[1][1] + 0.05, 0.1};  // so do 1 and 4: the first
  s.numbers.assign(s.positions.size(), 1);
  s.cell.lattice = {{{12, 0, 0}, {0, 12, 0}, {0, 0, 12}}};
  s.cell.pbc = {true, true, true};
  s.origin = "cell.xyz:2";
  try {
    build_neighbor_list(s, 5.0);
    FAIL() << "overlap not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cell.xyz:2: atoms 1 and 4 overlap"), std::string::npos) << e.what();
  }
}

TEST(NeighborList, Errors) {
  Structure s;
  s.positions = {{0, 0, 0}, {0.01, 0, 0}};
  s.numbers = {1, 1};
  s.origin = "frames.xyz:7";
  try {
    build_neighbor_list(s, 3.0);
    FAIL() << "overlap not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("frames.xyz:7: atoms 0 and 1 overlap"), std::string::npos) << e.what();
  }
  EXPECT_THROW(build_neighbor_list(s, -1.0), Error);
  s.positions[1] = {1, 0, 0};
  s.cell.pbc = {true, true, true};
  s.cell.lattice = {{{1, 0, 0}, {2, 0, 0}, {0, 0, 1}}};
  try {
    build_neighbor_list(s, 3.0);
    FAIL() << "singular cell not detected";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("singular"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mlip

// Cross-check against ASE's neighbour list (Debian python3-ase) on the same structures.
namespace mlip {
namespace {

using testing::source_dir;

TEST(NeighborList, SameEdgeSetsAsAse) {
  const std::string python = "/usr/bin/python3";
  if (std::system((python + " -c 'import ase.neighborlist' 2>/dev/null").c_str()) != 0) {
    GTEST_SKIP() << "Debian's python3-ase is not installed (scripts/install-deps.sh installs it)";
  }
  std::mt19937 rng(8);
  std::uniform_real_distribution<double> len(4.0, 9.0), tilt(-3.0, 3.0);
  std::vector<std::pair<Structure, double>> cases;
  const std::array<std::array<bool, 3>, 4> pbcs = {{{true, true, true}, {true, true, false}, {false, true, false},
                                                    {false, false, false}}};
  for (int t = 0; t < 12; ++t) {
    const Mat3 L = {{{len(rng), 0, 0}, {tilt(rng), len(rng), 0}, {tilt(rng), tilt(rng), len(rng)}}};
    cases.emplace_back(random_structure(rng, L, pbcs[t % 4], 25, 0.4), 2.0 + 0.5 * t);
  }
  nlohmann::json in = nlohmann::json::array();
  for (const auto& [s, rc] : cases) {
    in.push_back({{"positions", s.positions}, {"cell", s.cell.lattice}, {"pbc", s.cell.pbc}, {"cutoff", rc}});
  }
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "mlip_test_ase_nl";
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "in.json") << in.dump();
  const std::string cmd = python + " " + source_dir() + "/tests/python/ase_neighbors.py " +
                          (dir / "in.json").string() + " " + (dir / "out.json").string();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const nlohmann::json out = nlohmann::json::parse(std::ifstream(dir / "out.json"));
  ASSERT_EQ(out.size(), cases.size());
  for (std::size_t c = 0; c < cases.size(); ++c) {
    std::vector<Edge> ase;
    for (std::size_t e = 0; e < out[c]["i"].size(); ++e) {
      const auto& S = out[c]["S"][e];
      ase.emplace_back(out[c]["i"][e].get<int64_t>(), out[c]["j"][e].get<int64_t>(), S[0].get<int32_t>(),
                       S[1].get<int32_t>(), S[2].get<int32_t>());
    }
    std::sort(ase.begin(), ase.end());
    NeighborOptions opts;
    opts.min_distance = 0.0;
    const std::vector<Edge> ours = edges(build_neighbor_list(cases[c].first, cases[c].second, opts));
    EXPECT_EQ(ours, ase) << "case " << c << " pbc " << cases[c].first.cell.pbc[0] << cases[c].first.cell.pbc[1]
                         << cases[c].first.cell.pbc[2] << " cutoff " << cases[c].second;
  }
}

}  // namespace
}  // namespace mlip
