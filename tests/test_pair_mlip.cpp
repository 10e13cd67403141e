// pair_style mlip inside LAMMPS (through LAMMPS's library interface) against mlip's own
// evaluation of the same structure: energies, forces, global and per-atom virials, per-atom
// energies, to 1e-10 in float64, at any MPI rank count (ctest runs this on 1, 2 and 4 ranks,
// with empty subdomains on 4), for a Morse pair model, se_e2_a (local) and PaiNN with 2
// message-passing layers (ghost halo); NULL types; NVE energy conservation; the timing report;
// and the errors bad input must give.
#include <ATen/Context.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

// fmt::format is LAMMPS's own fmt (its headers include it; its symbols are in liblammps): mlip's
// fmt, or LibTorch's copy, may be another version.
#include "comm.h"
#include "lammps.h"
#include "library.h"
#include "neighbor.h"
#include "mlip/model/device.h"
#include "mlip/error.h"
#include "support/gpu.h"
#include "support/morse_model.h"
#include "support/reference.h"
#include "support/test_models.h"

namespace mlip {
namespace {

namespace fs = std::filesystem;
constexpr double kNktv2p = 1.6021765e6;  // LAMMPS metal units: eV/A^3 -> bar

int rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

int nprocs() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// Model files shared by all ranks (support/test_models.h): rank 0 writes, the others wait.
std::string model_path(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / "mlip_test_pair";
  const std::string path = (dir / (name + ".pt")).string();
  if (rank() == 0) {
    fs::create_directories(dir);
    testing::write_test_model(name, path);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return path;
}

std::string model_file(torch::Dtype dtype) { return model_path(dtype == torch::kFloat32 ? "morse32" : "morse64"); }

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

// A global scalar of compute `id` at the current step (thermo keywords cannot name computes).
double compute_scalar(void* handle, const std::string& id) {
  const auto* v = static_cast<double*>(lammps_extract_compute(handle, id.c_str(), LMP_STYLE_GLOBAL, LMP_TYPE_SCALAR));
  return v ? *v : std::nan("");
}

// With MLIP_TEST_PLUGIN=<path of mlipplugin.so>, every LAMMPS instance loads pair_style mlip from
// that plugin (a LAMMPS built without the MLIP package: scripts/check-lammps.sh VERSION plugin).
const char* plugin_path() { return std::getenv("MLIP_TEST_PLUGIN"); }

class Lammps {
 public:
  // kokkos: run with the KOKKOS package on (-k on), so that the */kk styles exist.
  explicit Lammps(const std::string& log = "none", bool kokkos = false) {
    std::vector<const char*> argv = {"lmp", "-log", log.c_str(), "-screen", "none", "-nocite"};
    if (kokkos) argv.insert(argv.end(), {"-k", "on", "t", "1", "-sf", "kk"});
    handle_ = lammps_open(static_cast<int>(argv.size()), const_cast<char**>(argv.data()), MPI_COMM_WORLD, nullptr);
    if (plugin_path()) ok(std::string("plugin load ") + plugin_path());
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

// Runs newline-separated commands, each of which must succeed.
void ok_lines(Lammps& lmp, const std::string& text) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) lmp.ok(line);
}

// An empty 9 A box with two atom types, for the small LAMMPS-input cases.
const char* kTwoTypeBox =
    "units metal\natom_modify map array\nregion box block 0 9 0 9 0 9 units box\ncreate_box 2 box\n";

// The whole text of a file (a LAMMPS log), empty if it cannot be read.
std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// LAMMPS atom type of atom i of a random_system: 1 = O, 2 and 3 = H (alternating).
int lammps_type(const Structure& s, std::size_t i) { return s.numbers[i] == 8 ? 1 : (i % 2 ? 2 : 3); }

// Sets up `s` in LAMMPS with atom types 1 = O, 2 = H, 3 = H (two types on one element).
void setup_system(Lammps& lmp, const Structure& s, const Box& box, const std::string& pair_style,
                  const std::string& pair_coeff = "* * O H H", const std::string& extra = "") {
  lmp.ok("units metal");
  lmp.ok("atom_style atomic");
  lmp.ok("atom_modify map array");
  lmp.ok("newton on");
  ok_lines(lmp, extra);
  lmp.ok(fmt::format("region box prism 0 {} 0 {} 0 {} {} {} {} units box", box.lx, box.ly, box.lz, box.xy,
                     box.xz, box.yz));
  lmp.ok("create_box 3 box");
  for (std::size_t i = 0; i < s.size(); ++i) {
    const int type = lammps_type(s, i);
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
  expect_matches_reference(s, model, "pair_style mlip " + model, fmt::format("processors {} 1 1", nprocs()));
}

// The architectures of potentials/, each against the reference: se_e2_a is local, PaiNN has 2
// message-passing layers (a ghost halo of 2 cutoffs; chunks with halos of their own).
TEST(PairMLIP, SeE2AMatchesReference) {
  const std::string model = model_path("se_e2_a");
  const Structure s = random_system(Box{}, 80, 1.0, 31);
  expect_matches_reference(s, model, "pair_style mlip " + model);
  expect_matches_reference(s, model, "pair_style mlip " + model + " chunk 5");
}

// A small skin, so that a ghost shell narrower than L * cutoff would show: LAMMPS's own shell
// (cutoff + skin) would then miss most of the second hop.
const char* kSmallSkin = "neighbor 0.1 bin";

TEST(PairMLIP, MessagePassingModelMatchesReference) {
  const std::string model = model_path("painn");
  ASSERT_EQ(Model::load(model).info().message_passing_layers, 2);
  const Structure s = random_system(Box{}, 80, 1.0, 32);
  expect_matches_reference(s, model, "pair_style mlip " + model + " exchange no", kSmallSkin);
}

// Message-passing chunks: each chunk of centres brings its own halo (local atoms of other
// chunks and ghosts within L-1 hops); down to one centre per call, the sums are the same.
TEST(PairMLIP, MessagePassingModelInChunksMatchesReference) {
  const std::string model = model_path("painn");
  const Structure s = random_system(Box{}, 80, 1.0, 38);
  for (int chunk : {1, 3, 17, 40}) {
    SCOPED_TRACE(chunk);
    expect_matches_reference(s, model, fmt::format("pair_style mlip {} exchange no chunk {}", model, chunk), kSmallSkin);
  }
}

// The chunk default depends on the model (64 local, 128 with ghost exchange, 128 for message
// passing over a halo); a repeated pair_style
// command starts from the defaults again rather than keeping the previous command's options.
TEST(PairMLIP, ChunkDefaultsPerModelKindAndRepeatedPairStyle) {
  const std::string log =
      (fs::temp_directory_path() / "mlip_test_pair" / fmt::format("chunk{}.log", nprocs())).string();
  {
    Lammps lmp(log);
    setup_system(lmp, random_system(Box{}, 40, 1.0, 39), Box{}, "pair_style mlip " + model_path("se_e2_a") + " chunk 5");
    lmp.ok("run 0");
    lmp.ok("pair_style mlip " + model_path("painn"));
    lmp.ok("pair_coeff * * O H H");
    lmp.ok("run 0");
    lmp.ok("pair_style mlip " + model_path("painn") + " exchange no chunk 9");
    lmp.ok("pair_coeff * * O H H");
    lmp.ok("run 0");
  }
  if (rank() == 0) {
    const std::string text = read_text(log);
    EXPECT_NE(text.find("ghost exchange in chunks of at most 128 local atoms (default; set with 'chunk N')"),
              std::string::npos) << text;
    EXPECT_NE(text.find("at most 9 local atoms per model call, in"), std::string::npos) << text;
  }
}

TEST(PairMLIP, MessagePassingAndSeE2AWithEmptySubdomains) {
  // All atoms in the lower 30% of x: with 4 ranks along x, two own no atom at all, and one of
  // them holds only ghosts that still carry messages to its neighbours' atoms.
  const Structure s = random_system(Box{}, 30, 0.3, 33);
  const std::string procs = fmt::format("processors {} 1 1", nprocs());
  for (const char* name : {"painn", "se_e2_a", "mace"}) {
    SCOPED_TRACE(name);
    const std::string model = model_path(name);
    expect_matches_reference(s, model, "pair_style mlip " + model + " exchange no", procs + "\n" + kSmallSkin);
    expect_matches_reference(s, model, "pair_style mlip " + model + " exchange no chunk 4", procs + "\n" + kSmallSkin);
  }
}

// Per-layer ghost exchange ('exchange yes'): features of ghosts forward-communicated between
// layers, their gradients reverse-communicated: the single-process reference's energies, forces,
// per-atom and centroid virials and pressure, for 2 and 3 layers, in a triclinic box, with
// empty subdomains, and a ghost shell of one cutoff + skin.
TEST(PairMLIP, GhostExchangeMatchesReference) {
  for (const char* name : {"painn", "painn3", "mace", "mace3"}) {
    SCOPED_TRACE(name);
    const std::string model = model_path(name);
    expect_matches_reference(random_system(Box{}, 80, 1.0, 81), model, "pair_style mlip " + model + " exchange yes",
                             kSmallSkin);
  }
}

// Chunked exchange: each layer takes the local atoms N at a time and is evaluated again in the
// backward pass; the sums are the same for any N.
TEST(PairMLIP, GhostExchangeInChunksMatchesReference) {
  const Structure s = random_system(Box{}, 80, 1.0, 84);
  for (const char* name : {"painn", "painn3", "mace"}) {
    for (int chunk : {1, 7, 64}) {
      SCOPED_TRACE(fmt::format("{} chunk {}", name, chunk));
      const std::string model = model_path(name);
      expect_matches_reference(s, model, fmt::format("pair_style mlip {} exchange yes chunk {}", model, chunk),
                               kSmallSkin);
    }
  }
}

// A float32 model's features are exchanged as float32 (their gradients summed in float32): the
// same energies and forces as the model evaluated on the whole system, to float32 round-off.
TEST(PairMLIP, GhostExchangeOfFloat32Features) {
  const Structure s = random_system(Box{}, 80, 1.0, 85);
  const std::string model = model_path("mace32");
  const testing::Evaluation ref = testing::evaluate_reference(Model::load(model), s);
  double fmax = 0.0;
  for (const auto& v : ref.forces) fmax = std::max({fmax, std::abs(v[0]), std::abs(v[1]), std::abs(v[2])});
  ASSERT_GT(fmax, 0.1);
  for (const char* chunk : {"", " chunk 7"}) {
    SCOPED_TRACE(chunk);
    Lammps lmp;
    setup_system(lmp, s, Box{}, "pair_style mlip " + model + " exchange yes" + chunk, "* * O H H", kSmallSkin);
    lmp.ok("run 0");
    EXPECT_NEAR(lammps_get_thermo(lmp.handle(), "pe"), ref.energy, 1e-5 * std::abs(ref.energy));
    const int n = static_cast<int>(s.size());
    std::vector<double> f(3 * n);
    lammps_gather_atoms(lmp.handle(), const_cast<char*>("f"), 1, 3, f.data());
    for (int i = 0; i < n; ++i)
      for (int d = 0; d < 3; ++d) EXPECT_NEAR(f[3 * i + d], ref.forces[i][d], 1e-5 * fmax) << "atom " << i;
  }
}

TEST(PairMLIP, GhostExchangeWithEmptySubdomains) {
  const Structure s = random_system(Box{}, 30, 0.3, 82);
  for (const char* name : {"painn", "painn3", "mace"}) {
    SCOPED_TRACE(name);
    const std::string model = model_path(name);
    expect_matches_reference(s, model, "pair_style mlip " + model + " exchange yes",
                             fmt::format("processors {} 1 1\n", nprocs()) + kSmallSkin);
    expect_matches_reference(s, model, "pair_style mlip " + model + " exchange yes chunk 7",
                             fmt::format("processors {} 1 1\n", nprocs()) + kSmallSkin);
  }
}

TEST(PairMLIP, GhostExchangeKeepsTheGhostShellAtOneCutoff) {
  Lammps lmp;
  setup_system(lmp, random_system(Box{}, 20, 1.0, 83), Box{}, "pair_style mlip " + model_path("painn3") + " exchange yes");
  lmp.ok("run 0");
  EXPECT_EQ(static_cast<LAMMPS_NS::LAMMPS*>(lmp.handle())->comm->cutghostuser, 0.0);
  Lammps local;
  ok_lines(local, kTwoTypeBox);
  const std::string e = local.command("pair_style mlip " + model_path("se_e2_a") + " exchange yes");
  EXPECT_NE(e.find("needs a message-passing model that defines its layers"), std::string::npos) << e;
}

// The ghost shell of a message-passing model must be L * cutoff + skin: set automatically when
// the user's communication cutoff is smaller, kept when it is larger.
TEST(PairMLIP, MessagePassingSetsTheCommunicationCutoff) {
  const std::string model = model_path("painn");  // 2 layers, cutoff 3.0
  const Structure s = random_system(Box{}, 20, 1.0, 34);
  for (double user : {0.0, 12.0}) {
    Lammps lmp;
    setup_system(lmp, s, Box{}, "pair_style mlip " + model + " exchange no", "* * O H H", "neighbor 1.5 bin");
    if (user > 0) lmp.ok(fmt::format("comm_modify cutoff {}", user));
    lmp.ok("run 0");
    const auto* comm = static_cast<LAMMPS_NS::LAMMPS*>(lmp.handle())->comm;
    EXPECT_DOUBLE_EQ(comm->cutghostuser, user > 0 ? user : 2 * 3.0 + 1.5);
  }
  // Local models leave the communication cutoff alone (LAMMPS uses cutoff + skin).
  Lammps lmp;
  const std::string local = model_path("se_e2_a");
  setup_system(lmp, s, Box{}, "pair_style mlip " + local);
  lmp.ok("run 0");
  EXPECT_EQ(static_cast<LAMMPS_NS::LAMMPS*>(lmp.handle())->comm->cutghostuser, 0.0);
}

// After atoms have moved (several neighbour-list builds, and steps in between where atoms are
// up to skin/2 from where the lists were built), the message-passing forces are still exact.
// Ghost exchange (the default for models that define their layers) and the halo path.
class MessagePassingPath : public ::testing::TestWithParam<const char*> {};
INSTANTIATE_TEST_SUITE_P(PairMLIP, MessagePassingPath, ::testing::Values("exchange yes", "exchange no"),
                         [](const auto& p) { return std::string(p.param[9] == 'y' ? "Exchange" : "Halo"); });

TEST_P(MessagePassingPath, StaysExactAfterAtomsMove) {
  const std::string model = model_path("painn");
  const Structure s0 = random_system(Box{}, 60, 1.0, 35);
  Lammps lmp;
  setup_system(lmp, s0, Box{}, "pair_style mlip " + model + " " + GetParam(), "* * O H H", "neighbor 0.8 bin");
  lmp.ok("mass * 16.0");
  lmp.ok("neigh_modify every 1 delay 0 check yes");
  lmp.ok("velocity all create 3000 4928459 dist gaussian");
  lmp.ok("timestep 0.0005");
  lmp.ok("fix 1 all nve");
  lmp.ok("run 100");
  const int n = static_cast<int>(s0.size());
  ASSERT_EQ(lammps_get_thermo(lmp.handle(), "step"), 100.0);
  EXPECT_GE(static_cast<LAMMPS_NS::LAMMPS*>(lmp.handle())->neighbor->ncalls, 3) << "lists must be rebuilt";
  std::vector<double> x(3 * n), f(3 * n);
  lammps_gather_atoms(lmp.handle(), const_cast<char*>("x"), 1, 3, x.data());
  lammps_gather_atoms(lmp.handle(), const_cast<char*>("f"), 1, 3, f.data());
  // The final structure, and the largest minimum-image displacement from the start.
  Structure s = s0;
  const Mat3 inv = inverse(s.cell.lattice);
  double moved = 0.0;
  for (int i = 0; i < n; ++i) {
    Vec3 frac{};
    for (int d = 0; d < 3; ++d) s.positions[i][d] = x[3 * i + d];
    for (int k = 0; k < 3; ++k) {
      for (int d = 0; d < 3; ++d) frac[k] += (s.positions[i][d] - s0.positions[i][d]) * inv[d][k];
      frac[k] -= std::round(frac[k]);
    }
    Vec3 disp{};
    for (int d = 0; d < 3; ++d) disp[d] = frac[0] * s.cell.lattice[0][d] + frac[1] * s.cell.lattice[1][d] +
                                          frac[2] * s.cell.lattice[2][d];
    moved = std::max(moved, norm(disp));
  }
  EXPECT_GT(moved, 0.4) << "atoms must move by more than skin/2 for this test to mean anything";
  const testing::Evaluation ref = testing::evaluate_reference(Model::load(model), s);
  double fmax = 0.0;
  for (const auto& v : ref.forces) fmax = std::max({fmax, std::abs(v[0]), std::abs(v[1]), std::abs(v[2])});
  for (int i = 0; i < n; ++i)
    for (int d = 0; d < 3; ++d) EXPECT_NEAR(f[3 * i + d], ref.forces[i][d], 1e-10 * fmax) << "atom " << i;
}

// pair_coeff * * O H NULL: atoms of type 3 are not seen by the model at all. LAMMPS needs
// coefficients for every type pair, so the NULL type gets them from pair_style zero under
// hybrid/overlay; the mlip energy and forces must be those of the structure without type 3.
void expect_null_type_ignored(const std::string& model, unsigned seed, const std::string& keywords = "") {
  const Structure s = random_system(Box{}, 70, 1.0, seed);
  Structure kept;
  kept.cell = s.cell;
  std::vector<int> kept_index(s.size(), -1);
  int n_null = 0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (lammps_type(s, i) == 3) {
      ++n_null;
      continue;
    }
    kept_index[i] = static_cast<int>(kept.size());
    kept.positions.push_back(s.positions[i]);
    kept.numbers.push_back(s.numbers[i]);
  }
  ASSERT_GT(n_null, 10);
  Lammps lmp;
  setup_system(lmp, s, Box{}, "pair_style hybrid/overlay mlip " + model + keywords + " zero 4.0", "* * mlip O H NULL",
               kSmallSkin);
  lmp.ok("pair_coeff * * zero");
  lmp.ok("compute pe all pe/atom");
  lmp.ok("compute emlip all pair mlip");
  lmp.ok("run 0");

  const testing::Evaluation ref = testing::evaluate_reference(Model::load(model), kept);
  EXPECT_NEAR(compute_scalar(lmp.handle(), "emlip"), ref.energy, 1e-10 * std::abs(ref.energy));
  EXPECT_NEAR(lammps_get_thermo(lmp.handle(), "pe"), ref.energy, 1e-10 * std::abs(ref.energy));
  const int n = static_cast<int>(s.size());
  std::vector<double> f(3 * n), pe(n);
  lammps_gather_atoms(lmp.handle(), const_cast<char*>("f"), 1, 3, f.data());
  lammps_gather(lmp.handle(), const_cast<char*>("c_pe"), 1, 1, pe.data());
  double fmax = 0.0;
  for (const auto& v : ref.forces) fmax = std::max({fmax, std::abs(v[0]), std::abs(v[1]), std::abs(v[2])});
  ASSERT_GT(fmax, 0.1);
  for (int i = 0; i < n; ++i) {
    const int k = kept_index[i];
    for (int d = 0; d < 3; ++d) {
      if (k < 0) {
        EXPECT_EQ(f[3 * i + d], 0.0) << "NULL-type atom " << i;
      } else {
        EXPECT_NEAR(f[3 * i + d], ref.forces[k][d], 1e-10 * fmax) << "atom " << i;
      }
    }
    if (k < 0) {
      EXPECT_EQ(pe[i], 0.0) << "NULL-type atom " << i;
    } else {
      EXPECT_NEAR(pe[i], ref.atom_energy[k], 1e-10 * std::abs(ref.atom_energy[k])) << "atom " << i;
    }
  }
}

TEST(PairMLIP, NullTypeIsIgnoredLocalModel) { expect_null_type_ignored(model_path("se_e2_a"), 36); }

TEST(PairMLIP, NullTypeIsIgnoredMessagePassingModel) { expect_null_type_ignored(model_path("painn"), 37); }

// The same with the graph built by the model's device (here the CPU), and with the whole step
// (cells, edges, model, forces; in one chunk and in several) that a CUDA graph records.
TEST(PairMLIP, NullTypeIsIgnoredByTheDeviceGraphAndTheWholeStep) {
  for (const std::string keywords : {" graph device", " graph device cuda_graph eager", " graph device cuda_graph eager chunk 20"}) {
    SCOPED_TRACE(keywords);
    expect_null_type_ignored(model_path("se_e2_a"), 38, keywords);
  }
}

// NVE energy conservation of a water-like O/H system: 108 atoms, 2/3 of them H (masses 1.008
// and 15.999), at water's number density (0.1 / A^3, fcc lattice a = 3.47 A, where the pressure
// is about zero), at about 300 K. The potential is a Morse pair model (support/test_models.h
// "morse_md": well depths 0.5-0.8 eV at 2.6 A, alpha 1.6 / A, cutoff 5 A), which keeps the
// system bound and mechanically stable, overlaid with an se_e2_a model with random weights and an
// energy scale of 0.03-0.05 ("se_e2_a_md", cutoff 4 A), which brings the many-body forces of a
// real architecture into the dynamics. (A random se_e2_a model alone would not be bound, and
// the default Morse test model collapses at this density.) After 200 steps of equilibration
// from 600 K velocities (the velocity-Verlet energy offset from a state with no potential
// energy, ~2e-4 eV/atom at 0.5 fs, is a property of the integrator, not of the forces), the run
// is 2000 steps of 0.5 fs. Bound: max_t |E(t) - E(0)| / N < 1e-4 eV/atom, E the total energy
// read through the library interface every 20 steps (measured: ~4e-5 eV/atom).
struct NveRun {
  double drift = 0.0, tmin = 1e30, tmax = 0.0, pemax = -1e30, ese_change = 0.0, steps = 0.0;
  std::vector<double> x_early;   // positions (by atom ID) 100 steps after the equilibration
};

NveRun run_nve(const std::string& se_model) {
  const std::string morse = model_path("morse_md");
  Lammps lmp;
  lmp.ok("units metal");
  lmp.ok("atom_style atomic");
  lmp.ok("atom_modify map array");
  lmp.ok("newton on");
  lmp.ok("lattice fcc 3.47");
  lmp.ok("region box block 0 3 0 3 0 3");
  lmp.ok("create_box 2 box");
  lmp.ok("create_atoms 1 box");
  lmp.ok("set type 1 type/ratio 2 0.6667 12345");
  const int n = 108;
  EXPECT_EQ(lammps_get_natoms(lmp.handle()), n);
  lmp.ok("mass 1 15.999");
  lmp.ok("mass 2 1.008");
  lmp.ok(fmt::format("pair_style hybrid/overlay mlip {} mlip {}", morse, se_model));
  lmp.ok("pair_coeff * * mlip 1 O H");
  lmp.ok("pair_coeff * * mlip 2 O H");
  lmp.ok("neighbor 1.0 bin");
  lmp.ok("neigh_modify every 1 delay 0 check yes");
  lmp.ok("compute ese all pair mlip 2");
  lmp.ok("minimize 0 1e-4 100 1000");  // O and H have different well depths: relax the lattice
  lmp.ok("reset_timestep 0");
  lmp.ok("velocity all create 600 4928459 dist gaussian mom yes rot no");
  lmp.ok("timestep 0.0005");
  lmp.ok("fix 1 all nve");
  lmp.ok("run 200");
  const double e0 = lammps_get_thermo(lmp.handle(), "etotal");
  const double ese0 = compute_scalar(lmp.handle(), "ese");
  NveRun r;
  for (int block = 0; block < 100; ++block) {
    lmp.ok("run 20 pre no post no");
    if (block == 4) {
      r.x_early.resize(3 * n);
      lammps_gather_atoms(lmp.handle(), const_cast<char*>("x"), 1, 3, r.x_early.data());
    }
    const double t = lammps_get_thermo(lmp.handle(), "temp");
    r.drift = std::max(r.drift, std::abs(lammps_get_thermo(lmp.handle(), "etotal") - e0) / n);
    r.tmin = std::min(r.tmin, t);
    r.tmax = std::max(r.tmax, t);
    r.pemax = std::max(r.pemax, lammps_get_thermo(lmp.handle(), "pe") / n);
    r.ese_change = std::max(r.ese_change, std::abs(compute_scalar(lmp.handle(), "ese") - ese0));
  }
  r.steps = lammps_get_thermo(lmp.handle(), "step");
  if (rank() == 0)
    std::printf("NVE 2000 x 0.5 fs (%s): max |E(t)-E(0)|/N = %.3g eV/atom, T in [%.0f, %.0f] K, pe/N <= %.3f eV, "
                "se_e2_a energy changed by up to %.3g eV\n", se_model.c_str(), r.drift, r.tmin, r.tmax, r.pemax,
                r.ese_change);
  return r;
}

TEST(PairMLIP, NveConservesEnergy) {
  const NveRun r = run_nve(model_path("se_e2_a_md"));
  ASSERT_EQ(r.steps, 2200.0);
  EXPECT_LT(r.drift, 1e-4);
  EXPECT_LT(r.pemax, -4.0) << "the system must stay bound";
  EXPECT_GT(r.tmin, 200.0);
  EXPECT_LT(r.tmax, 400.0);
  EXPECT_GT(r.ese_change, 1e-3) << "the se_e2_a part must take part in the dynamics";
}

// The same run with the se_e2_a part compressed (tables down to 1 A). Its energy drift is no
// larger than the uncompressed model's (within 10%: the trajectories part after a few hundred
// steps, so the two drifts are two samples of the same integrator error); and, what a small
// compression error could not pass, 100 steps after the 200 of equilibration its atoms are where
// the uncompressed model's are to 1e-7 A, while the same run with the se_e2_a part scaled by 1.001 (a 0.1% force
// error on that part alone) is more than 1e-6 A away.
TEST(PairMLIP, NveDriftOfTheCompressedModelIsNoLarger) {
  const NveRun plain = run_nve(model_path("se_e2_a_md"));
  const NveRun compressed = run_nve(model_path("se_e2_a_md_compressed"));
  const NveRun off = run_nve(model_path("se_e2_a_md_scaled"));
  ASSERT_EQ(compressed.steps, 2200.0);
  EXPECT_GT(compressed.ese_change, 1e-3) << "the compressed se_e2_a part must take part in the dynamics";
  EXPECT_LE(compressed.drift, 1.1 * plain.drift) << "compressed " << compressed.drift << ", uncompressed " << plain.drift;
  auto apart = [&](const NveRun& r) {
    double d = 0;
    for (std::size_t k = 0; k < r.x_early.size(); ++k) d = std::max(d, std::abs(r.x_early[k] - plain.x_early[k]));
    return d;
  };
  if (rank() == 0)
    std::printf("100 NVE steps: compressed %.2e A from the uncompressed run, se_e2_a x 1.001 %.2e A\n",
                apart(compressed), apart(off));
  EXPECT_LT(apart(compressed), 1e-7);
  EXPECT_GT(apart(off), 1e-6) << "the test must see a 0.1% error in the se_e2_a part";
}

// `timing yes` reports, after each run, the time per atom-step in graph building, the model call
// and the force scatter, and the peak memory.
TEST(PairMLIP, TimingReportAfterRun) {
  const std::string model = model_path("se_e2_a");
  const std::string log = (fs::temp_directory_path() / "mlip_test_pair" / fmt::format("timing{}.log", nprocs())).string();
  {
    Lammps lmp(log);
    setup_system(lmp, random_system(Box{}, 40, 1.0, 38), Box{}, "pair_style mlip " + model + " timing yes");
    lmp.ok("fix 1 all nve");
    lmp.ok("run 3");
  }
  if (rank() == 0) {
    const std::string text = read_text(log);
    EXPECT_NE(text.find(fmt::format("pair_style mlip timing: 3 force calls, 40 atoms, {} ranks; us/atom-step", nprocs())),
              std::string::npos)
        << text;
    EXPECT_NE(text.find("peak RSS"), std::string::npos);
  }
}

// With the whole step on the device ('graph device cuda_graph'), `graph` is the host's own part
// (staging the inputs, unpacking the results) and `model` the rest of the step: both are timed.
TEST(PairMLIP, TimingOfTheWholeStepSplitsTheHostsStaging) {
  const std::string log = (fs::temp_directory_path() / "mlip_test_pair" / fmt::format("timing_step{}.log", nprocs())).string();
  {
    Lammps lmp(log);
    setup_system(lmp, random_system(Box{}, 40, 1.0, 38), Box{},
                 "pair_style mlip " + model_path("se_e2_a") + " graph device cuda_graph eager timing yes");
    lmp.ok("fix 1 all nve");
    lmp.ok("run 3");
  }
  if (rank() != 0) return;
  const std::string text = read_text(log);
  const std::size_t at = text.find("us/atom-step (rank average): graph ");
  ASSERT_NE(at, std::string::npos) << text;
  double graph = 0, model = 0;
  ASSERT_EQ(std::sscanf(text.c_str() + at, "us/atom-step (rank average): graph %lf, model %lf", &graph, &model), 2) << text;
  EXPECT_GT(graph, 0.0) << text;
  EXPECT_GT(model, 0.0) << text;
  EXPECT_NE(text.find("graph is the host's own part (staging the inputs, unpacking the results)"), std::string::npos)
      << text;
}

// `timing kernels` also profiles a run's steps but its first (rank 0) and prints the table; a run
// of one step has nothing profiled and says so; a longer run stops the profiler after 50 calls
// (it keeps every event: a whole MD run would fill the memory) and prints the table once.
TEST(PairMLIP, TimingKernelsProfilesTheStepsOfARunButItsFirst) {
  const std::string model = model_path("se_e2_a");
  const std::string log = (fs::temp_directory_path() / "mlip_test_pair" / fmt::format("kernels{}.log", nprocs())).string();
  {
    Lammps lmp(log);
    setup_system(lmp, random_system(Box{}, 40, 1.0, 38), Box{}, "pair_style mlip " + model + " timing kernels");
    lmp.ok("fix 1 all nve");
    lmp.ok("run 4");
    lmp.ok("run 1");
    lmp.ok("run 60");
  }
  if (rank() == 0) {
    const std::string text = read_text(log);
    EXPECT_NE(text.find("pair_style mlip timing: 4 force calls"), std::string::npos) << text;
    EXPECT_NE(text.find("pair_style mlip kernels: 3 force calls on rank 0 under LibTorch's profiler"),
              std::string::npos) << text;
    EXPECT_NE(text.find("pair_style mlip kernels: wall "), std::string::npos) << text;
    EXPECT_NE(text.find(" operator aten::"), std::string::npos) << text;
    EXPECT_NE(text.find("pair_style mlip kernels: nothing profiled"), std::string::npos) << text;
    EXPECT_NE(text.find("pair_style mlip kernels: 50 force calls on rank 0"), std::string::npos) << text;
    std::size_t tables = 0;
    for (auto at = text.find("under LibTorch's profiler"); at != std::string::npos;
         at = text.find("under LibTorch's profiler", at + 1))
      ++tables;
    EXPECT_EQ(tables, 2u) << "one table for 'run 4', one for 'run 60' (none at its end)";
    EXPECT_EQ(text.find("nothing profiled"), text.rfind("nothing profiled")) << "only 'run 1' has nothing";
  }
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
  EXPECT_TRUE(has(error_of("pair_style mlip " + model + " chunks 5", "* * O H H"), "unknown keyword 'chunks' (known: chunk, head, timing, device, cuda_graph, graph, deterministic, exchange, out_freq"));
  EXPECT_TRUE(has(error_of("pair_style mlip " + model + " head pt", "* * O H H"), "head pt: the model has no heads"));
  EXPECT_TRUE(has(error_of("pair_style mlip " + model + " device gpu", "* * O H H"),
                  "pair_style mlip: unknown device 'gpu' (known: cpu, cuda, cuda:N, auto)"));
  EXPECT_TRUE(has(error_of("pair_style mlip " + model + " device cuda:x", "* * O H H"), "expected cuda:N"));
  EXPECT_TRUE(has(error_of("pair_style mlip " + model + " timing maybe", "* * O H H"),
                  "keyword 'timing' must be 'yes', 'no' or 'kernels', not 'maybe'"));
  EXPECT_TRUE(has(error_of("pair_style mlip " + model + " chunk 0", "* * O H H"),
                  "keyword 'chunk' must be a whole number >= 1, not '0'"));
  EXPECT_TRUE(has(error_of("pair_style mlip " + model, "* * O H H", "newton off"), "requires 'newton on'"));
}

// Two atoms 0.05 A apart stop the run with both atom IDs (one rank: LAMMPS reports an error found
// on one rank of several by aborting). A directory as the model path says it is one.
TEST(PairMLIP, AtomsTooCloseStopTheRunNamingBoth) {
  if (nprocs() > 1) GTEST_SKIP() << "error->one aborts a multi-rank library run";
  const std::string model = model_path("se_e2_a");
  Lammps lmp;
  ok_lines(lmp, std::string(kTwoTypeBox) +
                    "create_atoms 1 single 3 3 3 units box\ncreate_atoms 2 single 3.05 3 3 units box\n"
                    "create_atoms 2 single 5 5 5 units box\nmass 1 15.999\nmass 2 1.008\n"
                    "pair_style mlip " + model + "\npair_coeff * * O H");
  const std::string e = lmp.command("run 0");
  EXPECT_NE(e.find("atoms 1 and 2 are 0.05 A apart (less than 0.1 A) at step 0"), std::string::npos) << e;
  EXPECT_NE(error_of("pair_style mlip " + fs::temp_directory_path().string(), "* * O H H")
                .find("is a directory, not a model file"),
            std::string::npos);
}

// A type whose mass is not its element's gets a warning (types in the wrong order are the usual
// cause); the element's own mass gets none.
TEST(PairMLIP, MassNotMatchingTheElementWarns) {
  const std::string model = model_path("se_e2_a");
  const std::string log =
      (fs::temp_directory_path() / "mlip_test_pair" / fmt::format("mass{}.log", nprocs())).string();
  {
    Lammps lmp(log);
    ok_lines(lmp, std::string(kTwoTypeBox) +
                      "create_atoms 1 single 3 3 3 units box\ncreate_atoms 2 single 4 3 3 units box\n"
                      "mass 1 1.008\nmass 2 1.008\n"   // type 1 is mapped to O below
                      "pair_style mlip " + model + "\npair_coeff * * O H\nrun 0");
  }
  if (rank() != 0) return;
  const std::string text = read_text(log);
  EXPECT_NE(text.find("atom type 1 is mapped to O (pair_coeff) but its mass is 1.008 (the element's is 15.9990)"),
            std::string::npos) << text;
  EXPECT_EQ(text.find("atom type 2 is mapped"), std::string::npos);
}

TEST(PairMLIP, UnitsLjIsAnError) {
  const std::string model = model_file(torch::kFloat64);
  Lammps lmp;
  lmp.ok("units lj");
  lmp.ok("region box block 0 9 0 9 0 9 units box");
  lmp.ok("create_box 1 box");
  lmp.ok("create_atoms 1 single 1 1 1 units box");
  lmp.ok("mass * 1.0");
  lmp.ok("pair_style mlip " + model);
  lmp.ok("pair_coeff * * O");
  const std::string e = lmp.command("run 0");
  EXPECT_NE(e.find("'units lj' has no scale to convert them to"), std::string::npos) << e;
}

// Forces against central finite differences of the energy LAMMPS itself reports: atoms are moved
// with `set atom ID x|y|z`, the energy is re-evaluated with `run 0`. h = 1e-4 A: the truncation
// error (~h^2 f''') and round-off (~1e-16 E / h) both stay below 1e-7 eV/A here.
void expect_forces_are_energy_gradient(const std::string& model, unsigned seed) {
  const Box box;
  const Structure s = random_system(box, 60, 1.0, seed);
  Lammps lmp;
  setup_system(lmp, s, box, "pair_style mlip " + model);
  lmp.ok("thermo_style custom step pe");
  lmp.ok("run 0");
  const int n = static_cast<int>(s.size());
  std::vector<double> f(3 * n), x(3 * n);
  lammps_gather_atoms(lmp.handle(), const_cast<char*>("f"), 1, 3, f.data());
  lammps_gather_atoms(lmp.handle(), const_cast<char*>("x"), 1, 3, x.data());
  const double h = 1e-4;
  const char* axis = "xyz";
  double fmax = 0.0;
  for (int i : {0, 7, 13, 29, 42, 59}) {
    for (int d = 0; d < 3; ++d) {
      double e[2];
      for (int side = 0; side < 2; ++side) {
        const double value = x[3 * i + d] + (side ? h : -h);
        lmp.ok(fmt::format("set atom {} {} {:.17g}", i + 1, axis[d], value));
        lmp.ok("run 0");
        e[side] = lammps_get_thermo(lmp.handle(), "pe");
      }
      lmp.ok(fmt::format("set atom {} {} {:.17g}", i + 1, axis[d], x[3 * i + d]));
      const double fd = -(e[1] - e[0]) / (2 * h);
      fmax = std::max(fmax, std::abs(f[3 * i + d]));
      EXPECT_NEAR(f[3 * i + d], fd, 1e-6 + 1e-6 * std::abs(fd)) << "atom " << i + 1 << " " << axis[d];
    }
  }
  EXPECT_GT(fmax, 0.1) << "the test atoms must feel non-trivial forces";
}

TEST(PairMLIP, ForcesAreTheGradientOfLammpsEnergySeE2A) { expect_forces_are_energy_gradient(model_path("se_e2_a"), 41); }

TEST(PairMLIP, ForcesAreTheGradientOfLammpsEnergyMessagePassing) {
  expect_forces_are_energy_gradient(model_path("painn"), 42);
}

// ---------------------------------------------------------------------------------------------
// pair_style mlip/kk (KOKKOS package; Serial backend in this build) against pair_style mlip: the
// same energies, forces, global virial, per-atom energies, per-atom and centroid virials, to
// 1e-10 relative, on every rank count ctest runs (1, 2 and 4), with newton on.

struct Snapshot {
  double pe = 0.0;
  double boltz = 0.0, nktv2p = 0.0;    // the unit style's kB and pressure * volume / energy
  std::vector<double> pressure, f, pe_atom, stress, cstress, x;
};

// Runs `setup` (commands, one per line: box, atoms, masses), the pair commands (one per line),
// then `run` (0 = just evaluate, else NVE steps), and gathers everything by atom ID. With kokkos,
// LAMMPS runs with -k on -sf kk: atom_style atomic is atomic/kk, pair_style mlip is mlip/kk.
Snapshot snapshot(bool kokkos, const std::string& setup, const std::string& pair_commands, int run = 0) {
  Lammps lmp("none", kokkos);
  Snapshot out;
  std::string commands = setup + pair_commands +
                         "\ncompute pe all pe/atom\ncompute s all stress/atom NULL\n"
                         "compute cs all centroid/stress/atom NULL\n"
                         "thermo_style custom step pe pxx pyy pzz pxy pxz pyz\n";
  if (run > 0)
    commands += "velocity all create 300 4928459 loop geom\ntimestep 0.0005\nfix 1 all nve\n"
                "neighbor 0.5 bin\nneigh_modify every 1 delay 0 check yes\n";
  commands += fmt::format("run {}\n", run);
  std::istringstream lines(commands);
  for (std::string line; std::getline(lines, line);) {
    const std::string err = lmp.command(line);
    if (!err.empty()) {
      ADD_FAILURE() << (kokkos ? "[kokkos] " : "") << line << ": " << err;
      return out;
    }
  }
  const int n = static_cast<int>(lammps_get_natoms(lmp.handle()));
  out.pe = lammps_get_thermo(lmp.handle(), "pe");
  out.boltz = *static_cast<double*>(lammps_extract_global(lmp.handle(), "boltz"));
  out.nktv2p = *static_cast<double*>(lammps_extract_global(lmp.handle(), "nktv2p"));
  for (const char* p : {"pxx", "pyy", "pzz", "pxy", "pxz", "pyz"}) out.pressure.push_back(lammps_get_thermo(lmp.handle(), p));
  out.f.resize(3 * n);
  out.x.resize(3 * n);
  out.pe_atom.resize(n);
  out.stress.resize(6 * n);
  out.cstress.resize(9 * n);
  lammps_gather_atoms(lmp.handle(), const_cast<char*>("f"), 1, 3, out.f.data());
  lammps_gather_atoms(lmp.handle(), const_cast<char*>("x"), 1, 3, out.x.data());
  lammps_gather(lmp.handle(), const_cast<char*>("c_pe"), 1, 1, out.pe_atom.data());
  lammps_gather(lmp.handle(), const_cast<char*>("c_s"), 1, 6, out.stress.data());
  lammps_gather(lmp.handle(), const_cast<char*>("c_cs"), 1, 9, out.cstress.data());
  return out;
}

double max_abs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

void expect_same(const std::vector<double>& a, const std::vector<double>& b, double tol, const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  const double scale = std::max(max_abs(b), 1e-30);
  int bad = 0;
  for (std::size_t k = 0; k < a.size(); ++k)
    if (std::abs(a[k] - b[k]) > tol * scale && ++bad <= 5) ADD_FAILURE() << what << "[" << k << "]: " << a[k] << " vs " << b[k];
  EXPECT_EQ(bad, 0) << what << ": entries differing by more than " << tol << " x max |value| " << scale;
}

// Two runs of one input: energy, pressure, forces, per-atom energies and stresses (centroid ones
// unless `centroid` is false) equal to `tol` relative, and, after a run, the positions.
void expect_same_run(const Snapshot& got, const Snapshot& want, double tol, bool after_run, bool centroid = true) {
  ASSERT_FALSE(want.f.empty());
  ASSERT_EQ(got.f.size(), want.f.size());
  EXPECT_NEAR(got.pe, want.pe, tol * std::abs(want.pe));
  expect_same(got.pressure, want.pressure, tol, "pressure");
  expect_same(got.f, want.f, tol, "forces");
  expect_same(got.pe_atom, want.pe_atom, tol, "pe/atom");
  expect_same(got.stress, want.stress, tol, "stress/atom");
  if (centroid) expect_same(got.cstress, want.cstress, tol, "centroid/stress/atom");
  if (after_run) expect_same(got.x, want.x, tol, "positions after the run");
}

// mlip/kk and mlip on the same input: everything equal to `tol` relative. `pair_commands` has
// {} where the style name goes: "mlip" for the reference, `kk_style` for the Kokkos run.
void expect_kokkos_matches(const std::string& setup, const std::string& pair_commands, int run = 0,
                           double tol = 1e-10, const std::string& kk_style = "mlip/kk", bool centroid = true) {
  auto with_style = [&](const std::string& style) {
    std::string text = pair_commands;
    for (std::size_t at; (at = text.find("{}")) != std::string::npos;) text.replace(at, 2, style);
    return text;
  };
  const Snapshot ref = snapshot(false, setup, with_style("mlip"), run);
  const Snapshot kk = snapshot(true, setup, with_style(kk_style), run);
  ASSERT_FALSE(ref.f.empty());
  ASSERT_GT(max_abs(ref.f), 0.05) << "the test system must have non-trivial forces";
  expect_same_run(kk, ref, tol, run > 0, centroid);
}

// Random O/H "water" atoms in the triclinic test box, types 1 = O, 2 = 3 = H.
// `fraction` < 1: atoms only in that lower fraction of x, and the ranks split along x (empty
// subdomains with 4 ranks and fraction 0.3).
// `units`: the same system in another unit style, lengths in its distance unit (`angstrom` of
// them per A; the neighbour skin is 2 A in every style).
std::string water_setup(int n, unsigned seed, double fraction = 1.0, const std::string& units = "metal",
                        double angstrom = 1.0) {
  const Box box;
  const Structure s = random_system(box, n, fraction, seed);
  const double a = angstrom;
  std::string cmds = "units " + units + "\natom_style atomic\natom_modify map array\nnewton on\n";
  cmds += fmt::format("neighbor {:.17g} bin\n", 2.0 * a);
  if (fraction < 1.0) cmds += fmt::format("processors {} 1 1\n", nprocs());
  cmds += fmt::format("region box prism 0 {:.17g} 0 {:.17g} 0 {:.17g} {:.17g} {:.17g} {:.17g} units box\ncreate_box 3 box\n",
                      box.lx * a, box.ly * a, box.lz * a, box.xy * a, box.xz * a, box.yz * a);
  for (std::size_t i = 0; i < s.size(); ++i)
    cmds += fmt::format("create_atoms {} single {:.17g} {:.17g} {:.17g} units box\n", lammps_type(s, i),
                        s.positions[i][0] * a, s.positions[i][1] * a, s.positions[i][2] * a);
  return cmds + "mass 1 15.999\nmass 2 1.008\nmass 3 1.008\n";
}

// Every unit style with physical units gives the physics of 'units metal': the same system with
// its lengths in the style's unit has the same energies, forces, pressure and per-atom virials
// once they are converted back to eV and A. Conversions from LAMMPS's constants: 1 A is
// `angstrom` distance units (update.cpp's values, restated), 1 eV is kB(style) / kB(metal) energy
// units, and pressure x volume is energy x nktv2p.
struct UnitStyle {
  const char* name;
  double angstrom;
};
constexpr UnitStyle kUnitStyles[] = {{"real", 1.0},          {"si", 1e-10},   {"cgs", 1e-8}, {"electron", 1.88972612},
                                     {"micro", 1e-4}, {"nano", 1e-1}};

void expect_units_agree_with_metal(bool kokkos, const std::string& model) {
  const std::string pair = "pair_style mlip " + model_path(model) + "\npair_coeff * * O H H";
  const Snapshot metal = snapshot(kokkos, water_setup(60, 61), pair);
  ASSERT_GT(max_abs(metal.f), 0.05) << "the test system must have non-trivial forces";
  for (const UnitStyle& u : kUnitStyles) {
    SCOPED_TRACE(u.name);
    Snapshot s = snapshot(kokkos, water_setup(60, 61, 1.0, u.name, u.angstrom), pair);
    ASSERT_EQ(s.f.size(), metal.f.size());
    const double ev = s.boltz / metal.boltz;                       // 1 eV in the style's energy unit
    const double pv = metal.nktv2p / (s.nktv2p * ev);              // its pressure x volume -> eV
    const double v = std::pow(u.angstrom, 3);                       // its volume / the metal volume
    for (double& x : s.f) x *= u.angstrom / ev;
    for (double& x : s.pe_atom) x /= ev;
    for (double& x : s.pressure) x *= pv * v;
    for (double& x : s.stress) x *= pv;
    for (double& x : s.cstress) x *= pv;
    EXPECT_NEAR(s.pe / ev, metal.pe, 1e-10 * std::abs(metal.pe));
    expect_same(s.f, metal.f, 1e-10, "forces");
    expect_same(s.pe_atom, metal.pe_atom, 1e-10, "pe/atom");
    expect_same(s.pressure, metal.pressure, 1e-10, "pressure");
    expect_same(s.stress, metal.stress, 1e-10, "stress/atom");
    expect_same(s.cstress, metal.cstress, 1e-10, "centroid/stress/atom");
  }
}

TEST(PairMLIP, UnitStylesAgreeWithMetal) { expect_units_agree_with_metal(false, "se_e2_a"); }

// Message passing: the communication cutoff (layers x cutoff + skin) in the style's distance unit.
TEST(PairMLIP, UnitStylesAgreeWithMetalMessagePassing) { expect_units_agree_with_metal(false, "painn"); }

// ---------------------------------------------------------------------------------------------
// Model deviation of a committee (pair_style mlip m0.pt m1.pt ...): the file's line, compute
// pair's vector and the per-atom d_mlip_devi_f against the committee's forces evaluated one model
// at a time by mlip's reference evaluation, with DeePMD-kit's definitions written out here.

struct OfflineDeviation {
  std::vector<double> atom;      // per-atom force deviation
  double columns[7] = {0.0};     // virial max min mean, force max min mean, energy
};

OfflineDeviation offline_deviation(const std::vector<std::string>& models, const Structure& s) {
  std::vector<testing::Evaluation> ev;
  for (const auto& m : models) ev.push_back(testing::evaluate_reference(Model::load(m), s));
  const double k = static_cast<double>(models.size()), n = static_cast<double>(s.size());
  auto stddev = [&](auto value) {
    double mean = 0.0, sq = 0.0;
    for (const auto& e : ev) mean += value(e) / k;
    for (const auto& e : ev) sq += (value(e) - mean) * (value(e) - mean) / k;
    return std::sqrt(sq);
  };
  OfflineDeviation out;
  double fmax = 0.0, fmin = 1e300, fsum = 0.0, vmax = 0.0, vmin = 1e300, vsum = 0.0;
  for (std::size_t i = 0; i < s.size(); ++i) {
    double var = 0.0;
    for (int d = 0; d < 3; ++d) var += std::pow(stddev([&](const testing::Evaluation& e) { return e.forces[i][d]; }), 2);
    out.atom.push_back(std::sqrt(var));
    fmax = std::max(fmax, out.atom.back());
    fmin = std::min(fmin, out.atom.back());
    fsum += out.atom.back();
  }
  for (int a = 0; a < 3; ++a)
    for (int b = 0; b < 3; ++b) {
      const double v = stddev([&](const testing::Evaluation& e) { return e.virial[a][b]; }) / n;
      vmax = std::max(vmax, v);
      vmin = std::min(vmin, v);
      vsum += v;
    }
  const double e = stddev([](const testing::Evaluation& x) { return x.energy; }) / n;
  const double c[7] = {vmax, vmin, vsum / 9, fmax, fmin, fsum / n, e};
  std::copy(c, c + 7, out.columns);
  return out;
}

// The numbers of the last line of a model deviation file (rank 0 reads it).
std::vector<double> last_deviation_line(const std::string& path, int* lines = nullptr) {
  std::ifstream in(path);
  std::string line, last;
  int count = 0;
  while (std::getline(in, line))
    if (!line.empty() && line[0] != '#') {
      last = line;
      ++count;
    }
  if (lines) *lines = count;
  std::istringstream words(last);
  std::vector<double> v;
  for (double x; words >> x;) v.push_back(x);
  return v;
}

void expect_deviation_matches_offline(const std::vector<std::string>& names, const std::string& options,
                                      double fill, unsigned seed, bool kokkos = false) {
  const Box box;
  const Structure s = random_system(box, 60, fill, seed);
  std::vector<std::string> models;
  std::string files;
  for (const auto& n : names) {
    models.push_back(model_path(n));
    files += " " + models.back();
  }
  const std::string out_file =
      (fs::temp_directory_path() / "mlip_test_pair" / fmt::format("devi_{}_{}_{}.out", seed, kokkos, nprocs())).string();
  Lammps lmp("none", kokkos);
  setup_system(lmp, s, box, "pair_style mlip" + files + " out_freq 1 out_file " + out_file + options, "* * O H H",
               fill < 1.0 ? fmt::format("processors {} 1 1", nprocs()) : "");
  lmp.ok("compute dev all pair mlip");
  lmp.ok("thermo_style custom step pe c_dev[1] c_dev[4] c_dev[7]");
  lmp.ok("run 0");

  const OfflineDeviation ref = offline_deviation(models, s);
  const int n = static_cast<int>(s.size());
  std::vector<double> atom(n);
  lammps_gather(lmp.handle(), const_cast<char*>("d_mlip_devi_f"), 1, 1, atom.data());
  expect_same(atom, ref.atom, 1e-10, "d_mlip_devi_f");
  const auto* vec = static_cast<double*>(lammps_extract_compute(lmp.handle(), "dev", LMP_STYLE_GLOBAL, LMP_TYPE_VECTOR));
  ASSERT_NE(vec, nullptr);
  const std::vector<double> expected(ref.columns, ref.columns + 7);
  expect_same(std::vector<double>(vec, vec + 7), expected, 1e-10, "compute pair mlip");
  EXPECT_GT(ref.columns[3], 1e-3) << "the committee's models must disagree";
  if (rank() != 0) return;
  const std::vector<double> line = last_deviation_line(out_file);
  ASSERT_EQ(line.size(), 8u) << out_file;
  EXPECT_EQ(line[0], 0.0);
  // The file has 11 significant digits.
  expect_same(std::vector<double>(line.begin() + 1, line.end()), expected, 1e-9, "model deviation file");
}

// Models that differ in architecture and cutoff (3.5, 4.0 A; PaiNN: 3.0 A, 2 message-passing
// layers, so the ghost shell and ghost neighbour lists come from it).
TEST(PairMLIP, ModelDeviationMatchesOfflineComputation) {
  expect_deviation_matches_offline({"se_e2_a", "se_e2_a_md", "painn", "mace"}, "", 1.0, 71);
}

TEST(PairMLIP, ModelDeviationInChunksWithEmptySubdomains) {
  expect_deviation_matches_offline({"se_e2_a", "painn", "se_e2_a_md"}, " chunk 7", 0.3, 72);
}

TEST(PairMLIP, ModelDeviationOfIdenticalModelsIsZero) {
  const std::string model = model_path("se_e2_a");
  const Structure s = random_system(Box{}, 40, 1.0, 73);
  Lammps lmp;
  const std::string out_file =
      (fs::temp_directory_path() / "mlip_test_pair" / fmt::format("devi_same_{}.out", nprocs())).string();
  setup_system(lmp, s, Box{}, fmt::format("pair_style mlip {} {} {} out_freq 1 out_file {}", model, model, model, out_file));
  lmp.ok("compute dev all pair mlip");
  lmp.ok("thermo_style custom step pe c_dev[4]");
  lmp.ok("run 0");
  const auto* vec = static_cast<double*>(lammps_extract_compute(lmp.handle(), "dev", LMP_STYLE_GLOBAL, LMP_TYPE_VECTOR));
  ASSERT_NE(vec, nullptr);
  // Zero up to the round-off of a mean of three equal numbers.
  for (int k = 0; k < 7; ++k) EXPECT_LT(std::abs(vec[k]), 1e-13) << "column " << k + 1;
}

// Reports every out_freq steps only; fix halt stops a run on the force deviation.
TEST(PairMLIP, ModelDeviationEveryNStepsAndFixHalt) {
  const std::string out_file =
      (fs::temp_directory_path() / "mlip_test_pair" / fmt::format("devi_halt_{}.out", nprocs())).string();
  Lammps lmp;
  ok_lines(lmp, water_setup(60, 74) + fmt::format("pair_style mlip {} {} out_freq 2 out_file {}\npair_coeff * * O H H\n",
                                                  model_path("se_e2_a_md"), model_path("se_e2_a"), out_file) +
                    "velocity all create 300 8812 loop geom\ntimestep 0.0005\nfix 1 all nve\n"
                    "thermo 1\nrun 5");
  int lines = 0;
  if (rank() == 0) {
    const std::vector<double> last = last_deviation_line(out_file, &lines);
    EXPECT_EQ(lines, 3) << "steps 0, 2 and 4";
    ASSERT_FALSE(last.empty());
    EXPECT_EQ(last[0], 4.0);
  }
  ok_lines(lmp, "compute dev all pair mlip\nvariable maxf equal c_dev[4]\n"
                "fix stop all halt 2 v_maxf > 1e-6 error continue\nrun 10");
  // fix halt checks on multiples of 2, where the deviation is reported too: 6 is the first.
  EXPECT_EQ(lammps_get_thermo(lmp.handle(), "step"), 6.0) << "the run must stop at the first check";
}

TEST(PairMLIP, ModelDeviationKeywordsNeedACommittee) {
  Lammps lmp;
  ok_lines(lmp, kTwoTypeBox);
  const std::string e = lmp.command("pair_style mlip " + model_path("se_e2_a") + " out_freq 10");
  EXPECT_NE(e.find("give two or more model files"), std::string::npos) << e;
  const std::string e2 = lmp.command("pair_style mlip " + model_path("se_e2_a") + " " + model_path("se_e2_a") + " out_freq 0");
  EXPECT_NE(e2.find("keyword 'out_freq' must be a whole number >= 1, not '0'"), std::string::npos) << e2;
}

// bcc tantalum, 4 x 4 x 4 cells (128 atoms), atoms displaced randomly by up to 0.15 A.
const std::string ta_setup =
    "units metal\natom_style atomic\natom_modify map array\nnewton on\nlattice bcc 3.30\n"
    "region box block 0 4 0 4 0 4\ncreate_box 1 box\ncreate_atoms 1 box\n"
    "displace_atoms all random 0.15 0.15 0.15 8812 units box\nmass 1 180.95\n";

// 'device cpu' is the default's path; 'device auto' without a GPU is the CPU too, and 'device
// cuda' without one is an error that says so (with a GPU: the PairMLIPGpu cases).
TEST(PairMLIP, DeviceCpuAndAutoWithoutGpu) {
  const std::string model = model_path("se_e2_a");
  const Structure s = random_system(Box{}, 60, 1.0, 51);
  expect_matches_reference(s, model, "pair_style mlip " + model + " device cpu");
  const std::string graph = error_of("pair_style mlip " + model + " device cpu cuda_graph yes", "* * O H H");
  EXPECT_NE(graph.find("cuda_graph yes needs the model on a GPU ('device cuda')"), std::string::npos) << graph;
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: PairMLIPGpu covers auto and cuda";
  expect_matches_reference(s, model, "pair_style mlip " + model + " device auto");
  const std::string e = error_of("pair_style mlip " + model + " device cuda", "* * O H H");
  EXPECT_NE(e.find("device 'cuda' asked for, but no GPU can be used"), std::string::npos) << e;
}

// pair_style mlip on the rank's GPU against the same on the CPU (float64): energies, forces,
// per-atom energies and virials, and a short NVE trajectory. Skipped without a GPU.
// 'graph device' (pair_mlip_device_graph.cpp): the graph built from the positions by the device
// kernels (here their CPU loop), forces and virials summed there, equals the host graph from
// LAMMPS's neighbour list: local, message-passing (halo instead of the exchange) and MACE models,
// in one call and in calls of 50 atoms (each with its own graph), through a few steps, with
// per-atom energies and virials.
TEST(PairMLIP, DeviceGraphEqualsTheHostGraph) {
  for (const std::string name : {"se_e2_a", "painn", "mace", "se_e2_a chunk 50", "painn chunk 50"}) {
    const std::string model = model_path(name.substr(0, name.find(' '))) + name.substr(std::min(name.find(' '), name.size()));
    const std::string setup = water_setup(80, 60);
    const Snapshot host = snapshot(false, setup, "pair_style mlip " + model + "\npair_coeff * * O H H", 3);
    const Snapshot device = snapshot(false, setup, "pair_style mlip " + model + " graph device\npair_coeff * * O H H", 3);
    SCOPED_TRACE(name);
    expect_same_run(device, host, 1e-10, true);
  }
  const std::string model = model_path("se_e2_a");
  const std::string exchange = error_of("pair_style mlip " + model_path("painn") + " graph device exchange yes", "* * O H H");
  EXPECT_NE(exchange.find("graph device is not for the ghost exchange"), std::string::npos) << exchange;
  const std::string committee = error_of("pair_style mlip " + model + " " + model + " graph device", "* * O H H");
  EXPECT_NE(committee.find("graph device is not for several models"), std::string::npos) << committee;
  const std::string value = error_of("pair_style mlip " + model + " graph gpu", "* * O H H");
  EXPECT_NE(value.find("keyword 'graph' must be 'host' or 'device', not 'gpu'"), std::string::npos) << value;
  // Pairs LAMMPS's list would leave out cannot be left out of a graph it does not read.
  auto run_error = [&](const std::string& commands) {
    Lammps lmp;
    std::istringstream lines(water_setup(20, 64) + commands + "\nrun 0");
    for (std::string line; std::getline(lines, line);)
      if (const std::string e = lmp.command(line); !e.empty()) return e;
    return std::string("no error");
  };
  const std::string pair = "pair_style mlip " + model + " graph device\npair_coeff * * O H H\n";
  const std::string excluded = run_error(pair + "neigh_modify exclude type 1 2");
  EXPECT_NE(excluded.find("graph device builds its own graph and cannot leave out the pairs 'neigh_modify exclude'"),
            std::string::npos) << excluded;
  EXPECT_EQ(run_error(pair), "no error");
  // LAMMPS builds no neighbour list for graph device (its request is occasional, never built): at
  // 1M atoms that list would be about 2e8 pairs made on the host at every reneighbouring.
  for (const bool device : {false, true}) {
    Lammps lmp;
    std::istringstream lines(water_setup(20, 64) + "pair_style mlip " + model + (device ? " graph device" : "") +
                             "\npair_coeff * * O H H\nrun 2");
    for (std::string line; std::getline(lines, line);) ASSERT_EQ(lmp.command(line), "") << line;
    const int list = lammps_find_pair_neighlist(lmp.handle(), "mlip", 1, 0, 0);
    ASSERT_GE(list, 0);
    if (device) EXPECT_EQ(lammps_neighlist_num_elements(lmp.handle(), list), 0) << "graph device: LAMMPS built a list";
    else EXPECT_GT(lammps_neighlist_num_elements(lmp.handle(), list), 0) << "graph host: LAMMPS's list, built";
  }
  // Nor centres only of the group 'neigh_modify include' names.
  const std::string included = run_error(pair + "group oxygen type 1\natom_modify first oxygen\nneigh_modify include oxygen");
  EXPECT_NE(included.find("graph device takes every local atom as a centre, not only the group 'neigh_modify include'"),
            std::string::npos) << included;
  // Nor the bonded pairs special_bonds leaves out (lj 0 0 0: a molecular atom style's default).
  auto molecular_error = [&](const std::string& special) {
    Lammps lmp;
    std::istringstream lines("units metal\natom_style bond\natom_modify map array\nregion box block 0 8 0 8 0 8\n"
                             "create_box 3 box\ncreate_atoms 1 single 1 1 1\ncreate_atoms 2 single 2 1 1\n"
                             "create_atoms 3 single 1 2 1\nmass * 1.0\n" +
                             special + pair + "run 0");
    for (std::string line; std::getline(lines, line);)
      if (const std::string e = lmp.command(line); !e.empty()) return e;
    return std::string("no error");
  };
  const std::string bonded = molecular_error("");
  EXPECT_NE(bonded.find("graph device builds its own graph with every pair within the cutoff, bonded ones too"),
            std::string::npos) << bonded;
  EXPECT_EQ(molecular_error("special_bonds lj 1 1 1\n"), "no error");
}

// 'cuda_graph eager': the padded paths a CUDA graph records, run without recording (here on the
// CPU): with 'graph device' the whole step (mlip/model/device_step.h: cells, edges grouped by net,
// model, forces onto the atoms), else the model call on the grouped graph; both equal the host
// graph's step, over a few steps of MD with per-atom energies and virials, in one call a step and in
// calls of at most 'chunk' atoms; PaiNN's and MACE's model call and whole step too (message
// passing, the halo in the grouped graph; in the whole step each chunk's halo found on the device).
TEST(PairMLIP, CudaGraphEagerEqualsTheHostGraph) {
  // The whole step in one chunk and in chunks of at most 25 local atoms (several per rank).
  for (const std::string keywords : {" graph device cuda_graph eager", " graph device cuda_graph eager chunk 25",
                                     " cuda_graph eager", " cuda_graph eager chunk 25"}) {
    for (const auto& [model, setup, coeff] :
         {std::tuple{model_path("se_e2_a"), water_setup(80, 60), "* * O H H"},
          std::tuple{model_path("se_e2_a_md_compressed"), ta_setup, "* * O"},
          std::tuple{model_path("se_e2_a"), water_setup(40, 54, 0.3), "* * O H H"}}) {
      const Snapshot host = snapshot(false, setup, "pair_style mlip " + model + "\npair_coeff " + coeff, 3);
      const Snapshot eager = snapshot(false, setup, "pair_style mlip " + model + keywords + "\npair_coeff " + coeff, 3);
      SCOPED_TRACE(model + keywords);
      expect_same_run(eager, host, 1e-10, true);
    }
  }
  // PaiNN's and MACE's model call with static shapes (their halo included;
  // mlip/model/grouped_graph.h); their whole step below.
  // A multi-head MACE with a head chosen (forward_grouped_heads).
  for (const auto& [mp, keywords] : {std::pair{"painn", ""}, {"mace", ""}, {"mace_heads", " head c"}}) {
    SCOPED_TRACE(std::string(mp) + keywords);
    const std::string pair_style = "pair_style mlip " + model_path(mp) + keywords + " exchange no";
    const Snapshot host = snapshot(false, water_setup(80, 60), pair_style + "\npair_coeff * * O H H", 3);
    const Snapshot eager = snapshot(false, water_setup(80, 60), pair_style + " cuda_graph eager\npair_coeff * * O H H", 3);
    expect_same_run(eager, host, 1e-10, true);
  }
  // In calls of at most 25 local atoms, each with its halo, through the one grouped capacity.
  const std::string painn_chunks = "pair_style mlip " + model_path("painn") + " exchange no";
  expect_same_run(snapshot(false, water_setup(80, 60), painn_chunks + " cuda_graph eager chunk 25\npair_coeff * * O H H", 3),
                  snapshot(false, water_setup(80, 60), painn_chunks + "\npair_coeff * * O H H", 3), 1e-10, true);
  // Their whole step: PaiNN of 2 and 3 layers, in one chunk and in chunks of 25 (each with its
  // halo), and MACE.
  for (const std::string name : {"painn", "painn3", "painn chunk 25", "painn3 chunk 25", "mace"}) {
    SCOPED_TRACE(name + ", the whole step");
    const std::string model = model_path(name.substr(0, name.find(' '))) + name.substr(std::min(name.find(' '), name.size()));
    const Snapshot host = snapshot(false, water_setup(80, 60), "pair_style mlip " + model + "\npair_coeff * * O H H", 3);
    const Snapshot step = snapshot(false, water_setup(80, 60),
                                   "pair_style mlip " + model + " graph device cuda_graph eager\npair_coeff * * O H H", 3);
    expect_same_run(step, host, 1e-10, true);
  }
  const std::string value = error_of("pair_style mlip " + model_path("se_e2_a") + " cuda_graph maybe", "* * O H H");
  EXPECT_NE(value.find("keyword 'cuda_graph' must be 'yes', 'no' or 'eager', not 'maybe'"), std::string::npos) << value;
}

// 'deterministic yes' turns on LibTorch's deterministic kernels for the process ('no' turns them
// off); on the CPU, whose kernels are deterministic either way, the run is the same bitwise.
TEST(PairMLIP, DeterministicKeyword) {
  const std::string model = "pair_style mlip " + model_path("se_e2_a");
  const Snapshot fixed = snapshot(false, water_setup(80, 60), model + " deterministic yes\npair_coeff * * O H H", 3);
  EXPECT_TRUE(at::globalContext().deterministicAlgorithms());
  const Snapshot plain = snapshot(false, water_setup(80, 60), model + " deterministic no\npair_coeff * * O H H", 3);
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
  expect_same_run(fixed, plain, 0.0, true);
  const std::string x = error_of(model + " deterministic maybe", "* * O H H");
  EXPECT_NE(x.find("keyword 'deterministic' must be 'yes' or 'no', not 'maybe'"), std::string::npos) << x;
}

class PairMLIPGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  }
  // `gpu_args`: keywords for the GPU run only (cuda_graph yes).
  static void expect_gpu_matches(const std::string& setup, const std::string& pair_style_args,
                                 const std::string& coeff, int run = 0, double tol = 1e-8,
                                 const std::string& gpu_args = "") {
    const Snapshot cpu = snapshot(false, setup, "pair_style mlip " + pair_style_args + "\npair_coeff " + coeff, run);
    const Snapshot gpu = snapshot(
        false, setup, "pair_style mlip " + pair_style_args + " device cuda" + gpu_args + "\npair_coeff " + coeff, run);
    expect_same_run(gpu, cpu, tol, run > 0);
  }
};

TEST_F(PairMLIPGpu, SeE2AMatchesCpu) {
  expect_gpu_matches(water_setup(80, 52), model_path("se_e2_a"), "* * O H H");
  expect_gpu_matches(water_setup(80, 52), model_path("se_e2_a") + " chunk 7", "* * O H H");
}

// Without 'chunk' the calls are sized by the GPU's free memory: the first call takes 1024 of the
// 1200 local atoms (two calls of 600), later ones as many as the measured bytes allow.
TEST_F(PairMLIPGpu, CallsSizedByFreeMemoryMatchCpu) {
  expect_gpu_matches(water_setup(150, 58) + "replicate 2 2 2\n", model_path("se_e2_a"), "* * O H H", 3);
  expect_gpu_matches(water_setup(150, 59) + "replicate 2 2 2\n", model_path("painn"), "* * O H H", 3);
}

// A committee on the GPU without 'chunk': calls sized by the free memory (1200 local atoms: a first
// call of 1024, then as many as fit), every model in each call, measured together on the steps
// that report the deviation; energies, forces and the deviation as on the CPU.
TEST_F(PairMLIPGpu, CommitteeCallsSizedByFreeMemoryMatchCpu) {
  const std::string models = model_path("se_e2_a") + " " + model_path("se_e2_a_md") + " " + model_path("painn");
  const std::string setup = water_setup(150, 76) + "replicate 2 2 2\n";
  const fs::path dir = fs::temp_directory_path() / "mlip_test_pair";
  auto deviation = [&](const std::string& device, const std::string& log) {
    Lammps lmp(log);
    const std::string out = (dir / fmt::format("committee{}_{}.out", device.empty() ? "cpu" : "gpu", nprocs())).string();
    ok_lines(lmp, setup + "pair_style mlip " + models + " out_freq 1 out_file " + out + device + "\npair_coeff * * O H H\n" +
                      "compute dev all pair mlip\nthermo_style custom step pe c_dev[1] c_dev[4]\nrun 2");
    const auto* v = static_cast<double*>(lammps_extract_compute(lmp.handle(), "dev", LMP_STYLE_GLOBAL, LMP_TYPE_VECTOR));
    return v == nullptr ? std::vector<double>() : std::vector<double>(v, v + 7);
  };
  const std::string gpu_log = (dir / fmt::format("committee_gpu{}.log", nprocs())).string();
  const std::vector<double> cpu = deviation("", "none"), gpu = deviation(" device cuda", gpu_log);
  ASSERT_EQ(gpu.size(), 7u);
  expect_same(gpu, cpu, 1e-8, "compute pair mlip on the GPU");
  const std::string quiet = " out_file " + (dir / fmt::format("committee_md_{}.out", nprocs())).string();
  const Snapshot on_cpu = snapshot(false, setup, "pair_style mlip " + models + quiet + "\npair_coeff * * O H H", 2);
  const Snapshot on_gpu =
      snapshot(false, setup, "pair_style mlip " + models + quiet + " device cuda\npair_coeff * * O H H", 2);
  expect_same_run(on_gpu, on_cpu, 1e-8, true);
  if (rank() != 0) return;
  const std::string text = read_text(gpu_log);
  EXPECT_NE(text.find("local atoms per call sized by the GPU's free memory"), std::string::npos) << text;
  // Every step reports the deviation (out_freq 1): its calls run all three models, measured together.
  EXPECT_NE(text.find("model calls on the GPU of all the committee's models (steps reporting its deviation) take"),
            std::string::npos)
      << text;
}

// 'graph device' on the GPU against the host graph on the CPU.
TEST_F(PairMLIPGpu, DeviceGraphMatchesCpu) {
  expect_gpu_matches(water_setup(150, 61) + "replicate 2 2 2\n", model_path("se_e2_a"), "* * O H H", 3, 1e-8, " graph device");
  expect_gpu_matches(water_setup(80, 62), model_path("painn"), "* * O H H", 3, 1e-8, " graph device");
  expect_gpu_matches(water_setup(80, 63), model_path("mace"), "* * O H H", 3, 1e-8, " graph device");
}

TEST_F(PairMLIPGpu, MessagePassingMatchesCpu) {
  expect_gpu_matches(water_setup(80, 53), model_path("painn"), "* * O H H");
}

// MACE's operators on the GPU (mlip::equivariant_message, mlip::symmetric_contraction and their
// backwards: ATen formulations), in one call, in chunks, with 3 interactions, and in float32 (relative
// to the largest entry: float32 sums in another order); on 2 ranks through the ghost exchange.
TEST_F(PairMLIPGpu, MaceMatchesCpu) {
  expect_gpu_matches(water_setup(80, 56), model_path("mace"), "* * O H H");
  expect_gpu_matches(water_setup(80, 56), model_path("mace") + " chunk 7", "* * O H H");
  expect_gpu_matches(water_setup(80, 57), model_path("mace3"), "* * O H H");
  expect_gpu_matches(water_setup(80, 56), model_path("mace32"), "* * O H H", 0, 1e-4);
}

TEST_F(PairMLIPGpu, EmptySubdomainsMatchCpu) {
  expect_gpu_matches(water_setup(40, 54, 0.3), model_path("se_e2_a"), "* * O H H");
  expect_gpu_matches(water_setup(40, 55, 0.3), model_path("painn"), "* * O H H");
}

TEST_F(PairMLIPGpu, TrajectoryMatchesCpu) {
  expect_gpu_matches(ta_setup, model_path("se_e2_a_ta"), "* * Ta", 50);
}

// 'cuda_graph yes' (mlip/model/graph_capture.h): the recorded call against the CPU, on water (plain
// se_e2_a), on a jittered bcc lattice (the compressed se_e2_a, whose tables start at 1 A: random
// water has closer pairs), with empty subdomains, and over 50 steps of MD (replays with new
// positions and neighbour lists, and recordings anew where a group outgrows its capacity). A
// message-passing model's ghost exchange cannot be recorded (an error says so); without it, PaiNN's
// and MACE's model call is. With 'graph device' the whole step is recorded, on the same cases.
TEST_F(PairMLIPGpu, CudaGraphMatchesCpu) {
  expect_gpu_matches(water_setup(80, 52), model_path("se_e2_a"), "* * O H H", 0, 1e-8, " cuda_graph yes");
  expect_gpu_matches(ta_setup, model_path("se_e2_a_md_compressed"), "* * O", 20, 1e-8, " cuda_graph yes");
  expect_gpu_matches(water_setup(40, 54, 0.3), model_path("se_e2_a"), "* * O H H", 0, 1e-8, " cuda_graph yes");
  expect_gpu_matches(ta_setup, model_path("se_e2_a_ta"), "* * Ta", 50, 1e-8, " cuda_graph yes");
  // The whole step as one graph (mlip/model/device_step.h).
  expect_gpu_matches(water_setup(150, 61) + "replicate 2 2 2\n", model_path("se_e2_a"), "* * O H H", 3, 1e-8,
                     " graph device cuda_graph yes");
  expect_gpu_matches(ta_setup, model_path("se_e2_a_md_compressed"), "* * O", 20, 1e-8, " graph device cuda_graph yes");
  expect_gpu_matches(water_setup(40, 54, 0.3), model_path("se_e2_a"), "* * O H H", 0, 1e-8, " graph device cuda_graph yes");
  expect_gpu_matches(ta_setup, model_path("se_e2_a_ta"), "* * Ta", 50, 1e-8, " graph device cuda_graph yes");
  const std::string painn = "pair_style mlip " + model_path("painn") + " device cuda cuda_graph yes";
  const std::string x = error_of(painn, "* * O H H");
  EXPECT_NE(x.find("cuda_graph yes cannot record the ghost exchange"), std::string::npos) << x;
  // Without the exchange, PaiNN's and MACE's model call (the halo included) is recorded.
  expect_gpu_matches(water_setup(80, 52), model_path("painn"), "* * O H H", 3, 1e-8, " exchange no cuda_graph yes");
  expect_gpu_matches(water_setup(80, 52), model_path("mace"), "* * O H H", 3, 1e-8, " exchange no cuda_graph yes");
  expect_gpu_matches(water_setup(80, 52), model_path("mace_heads") + " head c", "* * O H H", 3, 1e-8,
                     " exchange no cuda_graph yes");
}

// 'deterministic yes' on the GPU: a run repeated repeats bitwise (the sums onto the atoms through
// ATen's sorting index_add instead of atomics, a fixed cuBLAS workspace), with the graph on the
// host and on the device, and the whole step recorded; and it equals the CPU as any GPU run does.
TEST_F(PairMLIPGpu, DeterministicRunsRepeatBitwise) {
  const std::string setup = water_setup(150, 61) + "replicate 2 2 2\n";
  for (const std::string keywords : {"", " graph device", " graph device cuda_graph yes"}) {
    SCOPED_TRACE(keywords);
    const std::string pair_style = "pair_style mlip " + model_path("se_e2_a") + " device cuda deterministic yes" + keywords;
    const Snapshot first = snapshot(false, setup, pair_style + "\npair_coeff * * O H H", 10);
    const Snapshot again = snapshot(false, setup, pair_style + "\npair_coeff * * O H H", 10);
    expect_same_run(again, first, 0.0, true);
  }
  expect_gpu_matches(setup, model_path("se_e2_a"), "* * O H H", 3, 1e-8, " graph device deterministic yes");
  (void)snapshot(false, setup, "pair_style mlip " + model_path("se_e2_a") + "\npair_coeff * * O H H", 0);
  EXPECT_FALSE(at::globalContext().deterministicAlgorithms());
}

// 'cuda_graph yes' in several calls a step, which share one recording (padded to the largest):
// of at most 'chunk' atoms, and without 'chunk' sized by the free memory (1200 local atoms: a first
// call of 1024 recorded, the rest replayed in it, then all of them in one, recorded anew).
TEST_F(PairMLIPGpu, CudaGraphInChunksMatchesCpu) {
  expect_gpu_matches(water_setup(80, 52), model_path("se_e2_a") + " chunk 25", "* * O H H", 3, 1e-8, " cuda_graph yes");
  expect_gpu_matches(water_setup(150, 58) + "replicate 2 2 2\n", model_path("se_e2_a"), "* * O H H", 3, 1e-8,
                     " cuda_graph yes");
  expect_gpu_matches(water_setup(80, 52), model_path("painn") + " chunk 25", "* * O H H", 3, 1e-8,
                     " exchange no cuda_graph yes");
  expect_gpu_matches(water_setup(150, 59) + "replicate 2 2 2\n", model_path("painn"), "* * O H H", 3, 1e-8,
                     " exchange no cuda_graph yes");
}

// Skipped, saying so, where this LAMMPS has no KOKKOS package (LAMMPS 4Jul2026 needs Kokkos >= 5.1,
// which the default build may not have: cmake/MlipKokkos.cmake).
class PairMLIPKokkos : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!lammps_config_has_package("KOKKOS")) GTEST_SKIP() << "this LAMMPS has no KOKKOS package";
    if (plugin_path()) GTEST_SKIP() << "mlipplugin.so has no mlip/kk";
  }
};

TEST_F(PairMLIPKokkos, WaterSeE2AMatchesMlip) {
  expect_kokkos_matches(water_setup(80, 31), "pair_style {} " + model_path("se_e2_a") + "\npair_coeff * * O H H");
}

TEST_F(PairMLIPKokkos, WaterSeE2AInChunksMatchesMlip) {
  expect_kokkos_matches(water_setup(80, 32),
                        "pair_style {} " + model_path("se_e2_a") + " chunk 7\npair_coeff * * O H H");
}

TEST_F(PairMLIPKokkos, HostVariantMatchesMlip) {
  expect_kokkos_matches(water_setup(60, 33), "pair_style {} " + model_path("se_e2_a") + "\npair_coeff * * O H H",
                        0, 1e-10, "mlip/kk/host");
}

TEST_F(PairMLIPKokkos, TantalumMatchesMlip) {
  expect_kokkos_matches(ta_setup, "pair_style {} " + model_path("se_e2_a_ta") + "\npair_coeff * * Ta");
}

// Type 3 NULL under hybrid/overlay (pair_style zero gives LAMMPS its coefficients). The centroid
// virial is not compared: LAMMPS's hybrid/overlay/kk (29Sep2021) does not sum its sub-styles'
// centroid virials (pair_hybrid_kokkos.cpp has no cvatom), whatever the sub-style.
TEST_F(PairMLIPKokkos, NullTypeMatchesMlip) {
  expect_kokkos_matches(water_setup(80, 34),
                        "pair_style hybrid/overlay {} " + model_path("se_e2_a") +
                            " zero 4.0\npair_coeff * * {} O H NULL\npair_coeff * * zero",
                        0, 1e-10, "mlip/kk", /*centroid=*/false);
}

TEST_F(PairMLIPKokkos, MessagePassingModelMatchesMlip) {
  for (const char* name : {"painn", "mace"}) {
    SCOPED_TRACE(name);
    expect_kokkos_matches(water_setup(80, 35),
                          fmt::format("pair_style {{}} {} exchange no\npair_coeff * * O H H", model_path(name)));
  }
}

// Ghost exchange in mlip/kk: the graph from its Kokkos kernels, the features exchanged between
// layers as in mlip (which matches the single-process reference: PairMLIP.GhostExchange*); PaiNN
// and MACE, L = 2 and 3, chunks of 7 and 64, empty subdomains on 4 ranks.
TEST_F(PairMLIPKokkos, GhostExchangeMatchesMlip) {
  for (const char* name : {"painn", "painn3", "mace", "mace3"}) {
    for (const char* chunk : {"", " chunk 7", " chunk 64"}) {
      SCOPED_TRACE(std::string(name) + chunk);
      expect_kokkos_matches(water_setup(80, 36, 0.3),
                            fmt::format("pair_style {{}} {} exchange yes{}\npair_coeff * * O H H", model_path(name), chunk));
    }
  }
}

// mlip's distance check on the device: the same error, naming both atoms.
TEST_F(PairMLIPKokkos, AtomsTooCloseStopTheRunNamingBoth) {
  if (nprocs() > 1) GTEST_SKIP() << "error->one aborts a multi-rank library run";
  Lammps lmp("none", /*kokkos=*/true);
  ok_lines(lmp, std::string(kTwoTypeBox) +
                    "create_atoms 1 single 3 3 3 units box\ncreate_atoms 2 single 5 5 5 units box\n"
                    "create_atoms 2 single 3.04 3 3 units box\nmass 1 15.999\nmass 2 1.008\n"
                    "pair_style mlip/kk " + model_path("se_e2_a") + "\npair_coeff * * O H");
  const std::string e = lmp.command("run 0");
  EXPECT_NE(e.find("atoms 1 and 3 are 0.04 A apart (less than 0.1 A) at step 0"), std::string::npos) << e;
}

// mlip/kk: the same committees as mlip's cases above (several cutoffs, PaiNN's whole halo beside
// se_e2_a's chunks, empty subdomains), against the same offline evaluation.
TEST_F(PairMLIPKokkos, ModelDeviationMatchesOfflineComputation) {
  expect_deviation_matches_offline({"se_e2_a", "se_e2_a_md", "painn"}, "", 1.0, 71, /*kokkos=*/true);
}

TEST_F(PairMLIPKokkos, ModelDeviationInChunksWithEmptySubdomains) {
  expect_deviation_matches_offline({"painn", "se_e2_a", "se_e2_a_md"}, " chunk 7", 0.3, 72, /*kokkos=*/true);
}

TEST_F(PairMLIPKokkos, UnitStylesAgreeWithMetal) { expect_units_agree_with_metal(true, "se_e2_a"); }

// 100 NVE steps with neighbour-list rebuilds: trajectories agree (to 1e-8: 100 steps amplify
// round-off differences in the force sums).
TEST_F(PairMLIPKokkos, TantalumTrajectoryMatchesMlip) {
  expect_kokkos_matches(ta_setup, "pair_style {} " + model_path("se_e2_a_ta") + "\npair_coeff * * Ta", 100, 1e-8);
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
  lammps_kokkos_finalize();  // Kokkos outlives the LAMMPS instances that started it
  MPI_Finalize();
  return global;
}
