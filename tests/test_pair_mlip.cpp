// pair_style mlip inside LAMMPS (through LAMMPS's library interface) against mlip's own
// evaluation of the same structure: energies, forces, global and per-atom virials, per-atom
// energies, to 1e-10 in float64, at any MPI rank count (ctest runs this on 1, 2 and 4 ranks,
// with empty subdomains on 4), and the errors bad input must give.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>

#include <fmt/format.h>

#include "library.h"
#include "mlip/error.h"
#include "support/morse_model.h"
#include "support/reference.h"

namespace mlip {
namespace {

namespace fs = std::filesystem;
constexpr double kNktv2p = 1.6021765e6;  // LAMMPS metal units: eV/A^3 -> bar

int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Model files shared by all ranks: rank 0 writes, the others wait.
std::string model_file(torch::Dtype dtype) {
  const fs::path dir = fs::temp_directory_path() / "mlip_test_pair";
  const std::string path = (dir / (dtype == torch::kFloat32 ? "morse32.pt" : "morse64.pt")).string();
  if (rank() == 0) {
    fs::create_directories(dir);
    Model m = testing::make_morse_model({"H", "O"}, 3.5, dtype);
    save_model(m.module(), m.metadata(), path);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

struct Box {
  double lx = 9.0, ly = 9.5, lz = 10.0, xy = 1.0, xz = -0.8, yz = 0.6;
  Mat3 lattice() const { return {{{lx, 0, 0}, {xy, ly, 0}, {xz, yz, lz}}}; }
};

// Random O/H atoms in a triclinic box, at least 0.9 Angstrom apart (minimum image), in
// fractional x below `fill` so that ranks owning the rest of the box can be empty.
Structure random_system(const Box& box, int n, double fill, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  Structure s;
  s.cell.lattice = box.lattice();
  s.cell.pbc = {true, true, true};
  const Mat3 L = s.cell.lattice;
  while (static_cast<int>(s.size()) < n) {
    const Vec3 f = {fill * u(rng), u(rng), u(rng)};
    Vec3 x{};
    for (int d = 0; d < 3; ++d) x[d] = f[0] * L[0][d] + f[1] * L[1][d] + f[2] * L[2][d];
    Structure trial = s;
    trial.positions.push_back(x);
    trial.numbers.push_back(s.size() % 3 == 0 ? 8 : 1);
    try {
      NeighborOptions opts;
      opts.min_distance = 0.9;
      build_neighbor_list(trial, 1.0, opts);
    } catch (const Error&) {
      continue;
    }
    s = trial;
  }
  return s;
}

class Lammps {
 public:
  Lammps() {
    const char* argv[] = {"lmp", "-log", "none", "-screen", "none", "-nocite"};
    handle_ = lammps_open(6, const_cast<char**>(argv), MPI_COMM_WORLD, nullptr);
  }
  ~Lammps() { lammps_close(handle_); }
  // Runs one command; returns LAMMPS's error message, empty on success.
  std::string command(const std::string& cmd) {
    lammps_command(handle_, cmd.c_str());
    if (!lammps_has_error(handle_)) return {};
    char buf[2048];
    lammps_get_last_error_message(handle_, buf, sizeof(buf));
    return buf;
  }
  void ok(const std::string& cmd) { ASSERT_EQ(command(cmd), "") << cmd; }
  void* handle() { return handle_; }

 private:
  void* handle_;
};

// Sets up `s` in LAMMPS with atom types 1 = O, 2 = H, 3 = H (two types on one element).
void setup_system(Lammps& lmp, const Structure& s, const Box& box, const std::string& pair_style,
                  const std::string& pair_coeff = "* * O H H", const std::string& extra = "") {
  lmp.ok("units metal");
  lmp.ok("atom_style atomic");
  lmp.ok("atom_modify map array");
  lmp.ok("newton on");
  if (!extra.empty()) lmp.ok(extra);
  lmp.ok(fmt::format("region box prism 0 {} 0 {} 0 {} {} {} {} units box", box.lx, box.ly, box.lz, box.xy,
                     box.xz, box.yz));
  lmp.ok("create_box 3 box");
  for (std::size_t i = 0; i < s.size(); ++i) {
    const int type = s.numbers[i] == 8 ? 1 : (i % 2 ? 2 : 3);
    lmp.ok(fmt::format("create_atoms {} single {:.17g} {:.17g} {:.17g} units box", type, s.positions[i][0],
                       s.positions[i][1], s.positions[i][2]));
  }
  lmp.ok("mass * 1.0");
  lmp.ok(pair_style);
  lmp.ok("pair_coeff " + pair_coeff);
}

void expect_matches_reference(const Structure& s, const std::string& model, const std::string& pair_style,
                              const std::string& extra = "") {
  const Box box;
  Lammps lmp;
  setup_system(lmp, s, box, pair_style, "* * O H H", extra);
  lmp.ok("compute pe all pe/atom");
  lmp.ok("compute s all stress/atom NULL");
  lmp.ok("compute cs all centroid/stress/atom NULL");
  lmp.ok("thermo_style custom step pe pxx pyy pzz pxy pxz pyz");
  lmp.ok("run 0");

  const testing::Evaluation ref = testing::evaluate_reference(Model::load(model), s);
  const int n = static_cast<int>(s.size());
  ASSERT_EQ(lammps_get_natoms(lmp.handle()), n);
  const double tol = 1e-10;
  EXPECT_NEAR(lammps_get_thermo(lmp.handle(), "pe"), ref.energy, tol * std::abs(ref.energy));

  std::vector<double> f(3 * n), pe(n), stress(6 * n), cstress(9 * n);
  lammps_gather_atoms(lmp.handle(), const_cast<char*>("f"), 1, 3, f.data());
  lammps_gather(lmp.handle(), const_cast<char*>("c_pe"), 1, 1, pe.data());
  lammps_gather(lmp.handle(), const_cast<char*>("c_s"), 1, 6, stress.data());
  lammps_gather(lmp.handle(), const_cast<char*>("c_cs"), 1, 9, cstress.data());
  double fmax = 0.0;
  for (const auto& v : ref.forces) fmax = std::max({fmax, std::abs(v[0]), std::abs(v[1]), std::abs(v[2])});
  ASSERT_GT(fmax, 0.1) << "the test system must have non-trivial forces";
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) EXPECT_NEAR(f[3 * i + d], ref.forces[i][d], tol * fmax) << "atom " << i;
    EXPECT_NEAR(pe[i], ref.atom_energy[i], tol * std::abs(ref.atom_energy[i])) << "atom " << i;
    for (int k = 0; k < 6; ++k) {
      // stress/atom is minus the per-atom virial, in bar * A^3 (velocities are zero).
      EXPECT_NEAR(stress[6 * i + k], -ref.atom_virial[i][k] * kNktv2p, 1e-9 * kNktv2p) << i << " " << k;
      EXPECT_NEAR(cstress[9 * i + k], -ref.atom_virial[i][k] * kNktv2p, 1e-9 * kNktv2p) << i << " " << k;
    }
  }
  const double volume = s.cell.volume();
  const char* names[6] = {"pxx", "pyy", "pzz", "pxy", "pxz", "pyz"};
  const double w[6] = {ref.virial[0][0], ref.virial[1][1], ref.virial[2][2],
                       ref.virial[0][1], ref.virial[0][2], ref.virial[1][2]};
  for (int k = 0; k < 6; ++k) {
    EXPECT_NEAR(lammps_get_thermo(lmp.handle(), names[k]), w[k] / volume * kNktv2p, 1e-9 * kNktv2p / volume)
        << names[k];
  }
}

TEST(PairMLIP, MatchesCoreEvaluationFloat64) {
  const std::string model = model_file(torch::kFloat64);
  const Structure s = random_system(Box{}, 80, 1.0, 21);
  expect_matches_reference(s, model, "pair_style mlip " + model);
}

TEST(PairMLIP, ChunkedEvaluationGivesTheSameResult) {
  const std::string model = model_file(torch::kFloat64);
  const Structure s = random_system(Box{}, 80, 1.0, 22);
  expect_matches_reference(s, model, "pair_style mlip " + model + " chunk 7");
}

TEST(PairMLIP, EmptySubdomainsWork) {
  // All atoms in the lower 30% of x: with 4 ranks along x, two own no atom at all.
  const std::string model = model_file(torch::kFloat64);
  const Structure s = random_system(Box{}, 30, 0.3, 23);
  int nprocs = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &nprocs);
  expect_matches_reference(s, model, "pair_style mlip " + model, fmt::format("processors {} 1 1", nprocs));
}

TEST(PairMLIP, Float32ModelIsCloseToFloat64) {
  const std::string m32 = model_file(torch::kFloat32);
  const Structure s = random_system(Box{}, 40, 1.0, 24);
  Lammps lmp;
  setup_system(lmp, s, Box{}, "pair_style mlip " + m32);
  lmp.ok("run 0");
  const double e64 = testing::evaluate_reference(Model::load(model_file(torch::kFloat64)), s).energy;
  EXPECT_NEAR(lammps_get_thermo(lmp.handle(), "pe"), e64, 1e-5 * std::abs(e64));
}

// Each bad input gives a LAMMPS error that names the problem.
std::string error_of(const std::string& pair_style, const std::string& pair_coeff, const std::string& extra = "") {
  const Structure s = random_system(Box{}, 6, 1.0, 25);
  Lammps lmp;
  lmp.ok("units metal");
  lmp.ok("atom_style atomic");
  lmp.ok("atom_modify map array");
  if (!extra.empty()) {
    const std::string e = lmp.command(extra);
    if (!e.empty()) return e;
  }
  lmp.ok("region box prism 0 9 0 9.5 0 10 1.0 -0.8 0.6 units box");
  lmp.ok("create_box 3 box");
  lmp.ok("create_atoms 1 single 1 1 1 units box");
  lmp.ok("create_atoms 2 single 2 1 1 units box");
  lmp.ok("mass * 1.0");
  for (const std::string& cmd : {pair_style, "pair_coeff " + pair_coeff, std::string("run 0")}) {
    const std::string e = lmp.command(cmd);
    if (!e.empty()) return e;
  }
  return "no error";
}

TEST(PairMLIP, BadInputGivesClearErrors) {
  const std::string model = model_file(torch::kFloat64);
  const std::string bad_file = (fs::temp_directory_path() / "mlip_test_pair" / "garbage.pt").string();
  if (rank() == 0) std::ofstream(bad_file) << "not a model";
  MPI_Barrier(MPI_COMM_WORLD);
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos ? ::testing::AssertionSuccess()
                                              : ::testing::AssertionFailure() << "'" << msg << "' lacks '" << part << "'";
  };
  EXPECT_TRUE(has(error_of("pair_style mlip /nonexistent/model.pt", "* * O H H"), "model file not found"));
  EXPECT_TRUE(has(error_of("pair_style mlip " + bad_file, "* * O H H"), "not a readable TorchScript model"));
  EXPECT_TRUE(has(error_of("pair_style mlip " + model, "* * O H C"), "element 'C' for atom type 3 is not in model"));
  EXPECT_TRUE(has(error_of("pair_style mlip " + model, "* * O H"), "followed by 3 element names"));
  EXPECT_TRUE(has(error_of("pair_style mlip " + model + " chunks 5", "* * O H H"), "unknown keyword 'chunks'"));
  EXPECT_TRUE(has(error_of("pair_style mlip " + model + " chunk 0", "* * O H H"), "chunk must be >= 1"));
  EXPECT_TRUE(has(error_of("pair_style mlip " + model, "* * O H H", "newton off"), "requires 'newton on'"));
}

TEST(PairMLIP, RejectsUnitsOtherThanMetal) {
  const std::string model = model_file(torch::kFloat64);
  Lammps lmp;
  lmp.ok("units real");
  lmp.ok("region box block 0 9 0 9 0 9 units box");
  lmp.ok("create_box 1 box");
  lmp.ok("create_atoms 1 single 1 1 1 units box");
  lmp.ok("mass * 1.0");
  lmp.ok("pair_style mlip " + model);
  lmp.ok("pair_coeff * * O");
  const std::string e = lmp.command("run 0");
  EXPECT_NE(e.find("needs 'units metal', not 'units real'"), std::string::npos) << e;
}

}  // namespace
}  // namespace mlip

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  // Only rank 0 prints gtest's report; every rank runs and asserts.
  if (mlip::rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int local = RUN_ALL_TESTS();
  int global = 0;
  MPI_Allreduce(&local, &global, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return global;
}
