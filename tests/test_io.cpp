// Data readers and the extended XYZ writer: the four reference sets in data/ (frame counts, values
// spot-checked against the raw files, unit conversions, the stress/virial signs), one small bad
// file per error case, an exact write -> read round trip, and a cross-check against ASE.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "mlip/error.h"
#include "mlip/data/io.h"
#include "support/error_of.h"
#include "support/same_frames.h"
#include "support/source_dir.h"

namespace mlip {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr double kKcalPerMol = 0.0433641043;  // eV
constexpr double kBar = 6.241509074e-7;       // eV/Å^3
constexpr double kBohrInAngstrom = 0.529177210903;
constexpr double kHartreeInEv = 27.211386245988;

using testing::source_dir;

std::string data(const std::string& relative) { return source_dir() + "/data/" + relative; }

using testing::error_of;
using testing::has;

void expect_contains(const std::string& message, std::initializer_list<std::string> parts) {
  for (const std::string& part : parts) {
    EXPECT_NE(message.find(part), std::string::npos) << "'" << part << "' not in: " << message;
  }
}

double trace(const Mat3& m) { return m[0][0] + m[1][1] + m[2][2]; }

void expect_vec_eq(const Vec3& a, const Vec3& b) {
  for (int d = 0; d < 3; ++d) EXPECT_DOUBLE_EQ(a[d], b[d]) << "component " << d;
}

// A fresh directory for bad files, removed afterwards.
class TempDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string pattern = (fs::temp_directory_path() / "mlip_test_io_XXXXXX").string();
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    dir_ = pattern;
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name, const std::string& content) const {
    const fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p, std::ios::binary) << content;
    return p.string();
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
};

// ---------------------------------------------------------------------------------------------
// Units

TEST(IoUnits, Factors) {
  Units u;
  EXPECT_EQ(u.length_factor(), 1.0);
  EXPECT_EQ(u.energy_factor(), 1.0);
  u.length = "bohr";
  u.energy = "hartree";
  EXPECT_DOUBLE_EQ(u.length_factor(), kBohrInAngstrom);
  EXPECT_DOUBLE_EQ(u.energy_factor(), kHartreeInEv);
  EXPECT_DOUBLE_EQ(u.force_factor(), kHartreeInEv / kBohrInAngstrom);
  EXPECT_DOUBLE_EQ(u.stress_factor(), kHartreeInEv / std::pow(kBohrInAngstrom, 3));
  u.energy = "Ry";
  EXPECT_DOUBLE_EQ(u.energy_factor(), kHartreeInEv / 2);
  u.energy = "kcal/mol";
  EXPECT_NEAR(u.energy_factor(), kKcalPerMol, 1e-8 * kKcalPerMol);
  u.energy = "kJ/mol";
  EXPECT_NEAR(u.energy_factor(), kKcalPerMol / 4.184, 1e-8 * kKcalPerMol);
  u.energy = "meV";
  EXPECT_DOUBLE_EQ(u.energy_factor(), 1e-3);
  u.length = "nm";
  EXPECT_DOUBLE_EQ(u.length_factor(), 10.0);
  EXPECT_NEAR(u.stress_factor("bar"), kBar, 1e-9 * kBar);
  u.stress = "GPa";
  EXPECT_NEAR(u.stress_factor("bar"), 1e4 * kBar, 1e-9 * 1e4 * kBar);
  u.stress = "kbar";
  EXPECT_NEAR(u.stress_factor(), 1e3 * kBar, 1e-9 * 1e3 * kBar);
  u.stress = "eV/A^3";
  EXPECT_EQ(u.stress_factor(), 1.0);
}

TEST(IoUnits, UnknownUnitsAreNamed) {
  expect_contains(error_of([] { Units{"furlong", "eV", ""}.length_factor(); }), {"length", "'furlong'"});
  expect_contains(error_of([] { Units{"angstrom", "MeV", ""}.energy_factor(); }), {"energy", "'MeV'"});
  expect_contains(error_of([] { Units{"angstrom", "eV", "psi"}.stress_factor(); }), {"stress", "'psi'"});
  ReadOptions options;
  options.units.energy = "erg";
  expect_contains(error_of([&] { read_extxyz(data("ethanol-rmd17/rmd17_ethanol_1000.xyz"), options); }),
                  {"'erg'"});
}

// ---------------------------------------------------------------------------------------------
// The reference data sets

TEST(IoData, WaterDeepmdHas320FramesIn3Systems) {
  EXPECT_EQ(detect_format(data("water-deepmd")), "deepmd");
  EXPECT_EQ(read_deepmd(data("water-deepmd/data_0")).size(), 80u);
  EXPECT_EQ(read_deepmd(data("water-deepmd/data_1")).size(), 160u);
  EXPECT_EQ(read_deepmd(data("water-deepmd/data_2")).size(), 80u);

  const std::vector<Structure> all = read_structures(data("water-deepmd"));
  ASSERT_EQ(all.size(), 320u);
  for (const Structure& s : all) {
    ASSERT_EQ(s.size(), 192u);
    EXPECT_EQ(s.numbers[0], 8);
    EXPECT_EQ(s.numbers[63], 8);
    EXPECT_EQ(s.numbers[64], 1);
    EXPECT_EQ(s.numbers[191], 1);
    EXPECT_EQ(s.cell.pbc, (std::array<bool, 3>{true, true, true}));
    EXPECT_DOUBLE_EQ(s.cell.lattice[0][0], static_cast<double>(12.444661140441895f));
    EXPECT_EQ(s.cell.lattice[0][1], 0.0);
    EXPECT_TRUE(s.energy.has_value());
    EXPECT_TRUE(s.has_forces());
    EXPECT_FALSE(s.virial.has_value());
  }
}

TEST(IoData, WaterDeepmdValuesMatchTheNpyFiles) {
  // Values from numpy.load of the float32 arrays.
  const std::vector<Structure> d0 = read_deepmd(data("water-deepmd/data_0"));
  EXPECT_EQ(d0[0].origin, data("water-deepmd/data_0") + ":frame 0");
  EXPECT_EQ(*d0[0].energy, -29943.90625);
  expect_vec_eq(d0[0].positions[0], {7.538785934448242, 2.0562100410461426, 4.52073860168457});
  expect_vec_eq(d0[0].forces[0], {0.6219968795776367, 0.18400980532169342, -0.042905766516923904});
  expect_vec_eq(d0[79].positions[191], {1.1107608079910278, 4.250199794769287, 7.020653247833252});
  EXPECT_EQ(*d0[79].energy, -29944.8515625);

  // data_1 has two sets; frames are numbered across them.
  const std::vector<Structure> d1 = read_deepmd(data("water-deepmd/data_1"));
  EXPECT_EQ(d1[80].origin, data("water-deepmd/data_1") + ":frame 80");
  EXPECT_EQ(*d1[0].energy, -29943.611328125);
  EXPECT_EQ(*d1[80].energy, -29944.060546875);
  expect_vec_eq(d1[80].positions[0], {7.303147315979004, 1.4327753782272339, 4.484760284423828});
  expect_vec_eq(d1[80].forces[0], {0.32436448335647583, -0.5972951054573059, 0.5611173510551453});

  const std::vector<Structure> d2 = read_structures(data("water-deepmd/data_2"));
  EXPECT_EQ(*d2[0].energy, -29943.515625);
  expect_vec_eq(d2[0].positions[0], {9.22133731842041, 0.9222871661186218, 3.1672475337982178});
}

TEST(IoData, TaFitsnapHas363FramesWithVirials) {
  EXPECT_EQ(detect_format(data("ta-fitsnap")), "fitsnap");
  const std::vector<Structure> all = read_structures(data("ta-fitsnap"));
  ASSERT_EQ(all.size(), 363u);
  std::size_t atoms = 0;
  for (const Structure& s : all) {
    atoms += s.size();
    for (int z : s.numbers) EXPECT_EQ(z, 73);
    EXPECT_TRUE(s.cell.any_periodic());
    EXPECT_TRUE(s.energy && s.virial && s.has_forces()) << s.origin;
  }
  EXPECT_EQ(atoms, 4224u);

  // The first file in sorted order, against its JSON text.
  const Structure& s = all[0];
  EXPECT_EQ(s.origin, data("ta-fitsnap/JSON/Displaced_A15/A15_1.json") + ":frame 0");
  ASSERT_EQ(s.size(), 64u);
  EXPECT_EQ(*s.energy, -754.0221);
  expect_vec_eq(s.positions[0], {10.59872, 10.5966, 0.05505});
  expect_vec_eq(s.forces[0], {-0.231571, 0.031614, -0.560153});
  const double volume = std::pow(10.6000003815, 3);
  EXPECT_NEAR((*s.virial)[0][0], 26594.42 * kBar * volume, 1e-9 * 26594.42 * kBar * volume);
  EXPECT_NEAR((*s.virial)[1][2], -1442.27 * kBar * volume, 1e-9 * 1442.27 * kBar * volume);
}

TEST(IoData, TaLatticeRowsAreCellVectors) {
  // Atom 1 of a 2-atom bcc cell sits at (a + b + c) / 2 only if the Lattice rows are a, b, c.
  const Structure s = read_fitsnap_json(data("ta-fitsnap/JSON/Elastic_BCC/BCC_deformed_0.json")).at(0);
  const Mat3& L = s.cell.lattice;
  for (int d = 0; d < 3; ++d) EXPECT_NEAR(s.positions[1][d], (L[0][d] + L[1][d] + L[2][d]) / 2, 1e-4);
  EXPECT_NE(L[1][0], 0.0);  // a triclinic cell
}

TEST(IoData, TaStressSignGivesPositiveVirialUnderCompression) {
  // a = 2.2 Å is far below bcc Ta's 3.3 Å: compressed, so the virial trace must be positive.
  const Structure compressed = read_fitsnap_json(data("ta-fitsnap/JSON/Volume_BCC/BCC_2.2.json")).at(0);
  const Structure expanded = read_fitsnap_json(data("ta-fitsnap/JSON/Volume_BCC/BCC_4.2.json")).at(0);
  EXPECT_GT(trace(*compressed.virial), 0.0);
  EXPECT_LT(trace(*expanded.virial), 0.0);
  EXPECT_NEAR((*compressed.virial)[0][0], 29925857.27 * kBar * std::pow(2.2, 3), 1e-6);

  // Thermodynamics: for a uniform strain, trace(W) / 3 = P V = -V dE/dV. Check it against central
  // differences of the energies along the equation of state (a = 2.2 ... 4.2 Å in 0.1 Å steps).
  const std::vector<Structure> eos = read_fitsnap_json(data("ta-fitsnap/JSON/Volume_BCC"));
  ASSERT_EQ(eos.size(), 21u);
  for (std::size_t i = 1; i + 1 < eos.size(); ++i) {
    const double v = eos[i].cell.volume();
    const double dE_dV =
        (*eos[i + 1].energy - *eos[i - 1].energy) / (eos[i + 1].cell.volume() - eos[i - 1].cell.volume());
    const double from_energy = -v * dE_dV;
    const double from_virial = trace(*eos[i].virial) / 3;
    EXPECT_NEAR(from_virial, from_energy, 0.03 * std::abs(from_energy) + 0.3) << eos[i].origin;
  }
}

TEST(IoData, Cu2sN2p2Has40FramesIn2Files) {
  const std::vector<Structure> a = read_structures(data("cu2s-n2p2/input.data"));
  const std::vector<Structure> b = read_structures(data("cu2s-n2p2/input.data.Cu2S_PBE"));
  ASSERT_EQ(a.size() + b.size(), 40u);
  EXPECT_EQ(a.size(), 20u);
  for (const std::vector<Structure>* set : {&a, &b}) {
    for (const Structure& s : *set) {
      ASSERT_EQ(s.size(), 144u);
      EXPECT_EQ(std::count(s.numbers.begin(), s.numbers.end(), 29), 96);
      EXPECT_EQ(std::count(s.numbers.begin(), s.numbers.end(), 16), 48);
      EXPECT_EQ(s.cell.pbc, (std::array<bool, 3>{true, true, true}));
      EXPECT_FALSE(s.virial.has_value());
      EXPECT_TRUE(s.has_forces());
    }
  }
  const Structure& s = a[0];
  EXPECT_EQ(s.origin, data("cu2s-n2p2/input.data") + ":frame 0");
  expect_vec_eq(s.cell.lattice[2], {-6.474115, -0.622266, 12.064082});
  EXPECT_EQ(s.numbers[0], 16);
  expect_vec_eq(s.positions[0], {8.97740, 0.46815, 10.16037});
  expect_vec_eq(s.forces[0], {-0.222358, 0.152265, 0.200886});
  EXPECT_EQ(*s.energy, -571.723972);
  EXPECT_EQ(*a[1].energy, -570.358649);
  EXPECT_EQ(*b[0].energy, -567.404752);
}

TEST(IoData, N2p2UnitsApply) {
  ReadOptions atomic;
  atomic.units.length = "bohr";
  atomic.units.energy = "hartree";
  const Structure s = read_n2p2(data("cu2s-n2p2/input.data"), atomic).at(0);
  EXPECT_DOUBLE_EQ(s.positions[0][0], 8.97740 * kBohrInAngstrom);
  EXPECT_DOUBLE_EQ(s.cell.lattice[0][0], 15.108884 * kBohrInAngstrom);
  EXPECT_DOUBLE_EQ(*s.energy, -571.723972 * kHartreeInEv);
  EXPECT_DOUBLE_EQ(s.forces[0][0], -0.222358 * kHartreeInEv / kBohrInAngstrom);
}

TEST(IoData, EthanolExtxyzInKcalPerMol) {
  EXPECT_EQ(detect_format(data("ethanol-rmd17/rmd17_ethanol_1000.xyz")), "extxyz");
  ReadOptions kcal;
  kcal.units.energy = "kcal/mol";
  const std::vector<Structure> frames =
      read_structures(data("ethanol-rmd17/rmd17_ethanol_1000.xyz"), "auto", kcal);
  ASSERT_EQ(frames.size(), 1000u);
  const std::vector<int> ethanol = {6, 6, 8, 1, 1, 1, 1, 1, 1};
  for (const Structure& s : frames) {
    EXPECT_EQ(s.numbers, ethanol);
    EXPECT_FALSE(s.cell.any_periodic());
    EXPECT_EQ(s.cell.volume(), 0.0);
    EXPECT_FALSE(s.virial.has_value());
  }
  const Structure& s = frames[0];
  EXPECT_EQ(s.origin, data("ethanol-rmd17/rmd17_ethanol_1000.xyz") + ":frame 0");
  expect_vec_eq(s.positions[0], {-0.02326528, -0.53193351, -0.16332991});
  EXPECT_NEAR(*s.energy, -97078.10995362196 * kKcalPerMol, 1e-8 * 97078.1 * kKcalPerMol);
  EXPECT_NEAR(s.forces[0][0], 58.32043527 * kKcalPerMol, 1e-8 * 58.3 * kKcalPerMol);
  EXPECT_NEAR(s.forces[8][2], 9.96988294 * kKcalPerMol, 1e-8 * 10 * kKcalPerMol);
  EXPECT_NEAR(*s.energy, -154.7 * kHartreeInEv, 1.0);  // SOURCE.md: about -154.7 Hartree
  // SOURCE.md lists (57, 672) as exact duplicates.
  EXPECT_EQ(frames[57].positions, frames[672].positions);

  // Without units the file's numbers pass through unchanged.
  const Structure raw = read_extxyz(data("ethanol-rmd17/rmd17_ethanol_1000.xyz")).at(0);
  EXPECT_EQ(*raw.energy, -97078.10995362196);
  EXPECT_EQ(raw.forces[0][0], 58.32043527);
}

// ---------------------------------------------------------------------------------------------
// Extended XYZ: features and errors

using Extxyz = TempDir;

// ExtxyzFile (an offset index; one frame parsed at a time) reads the frames read_extxyz reads,
// in any order and across block boundaries (frames of very different sizes, blank lines, a
// last line without a newline), and names the line of a bad atom count or a truncated frame.
TEST_F(Extxyz, ReadByIndexAsWhole) {
  std::string text;
  for (int k = 0; k < 40; ++k) {
    const int n = 1 + (k * 7) % 50;
    text += std::to_string(n) + "\nLattice=\"9 0 0 0 9 0 0 0 9\" Properties=species:S:1:pos:R:3:forces:R:3 energy=" +
            std::to_string(-1.25 * k) + "\n";
    for (int i = 0; i < n; ++i)
      text += (i % 3 ? "H " : "O ") + std::to_string(0.13 * i) + " " + std::to_string(0.07 * k) + " 0.5 0.1 0.2 " +
              std::to_string(0.01 * i) + "\n";
    if (k % 5 == 0) text += "\n";
  }
  text.pop_back();   // no newline at the end
  const std::string f = file("many.xyz", text);
  ReadOptions kcal;
  kcal.units.energy = "kcal/mol";
  const std::vector<Structure> whole = read_extxyz(f, kcal);
  const ExtxyzFile indexed(f, kcal);
  ASSERT_EQ(indexed.size(), whole.size());
  for (std::size_t k : {39u, 0u, 17u, 5u, 38u}) {
    const Structure s = indexed.frame(k);
    EXPECT_EQ(s.numbers, whole[k].numbers);
    EXPECT_EQ(s.positions, whole[k].positions);
    EXPECT_EQ(s.forces, whole[k].forces);
    EXPECT_EQ(s.energy, whole[k].energy);
    EXPECT_EQ(s.origin, whole[k].origin);
  }
  EXPECT_EQ(open_frame_reader(f)->size(), whole.size());
  const std::string bad = error_of([&] { ExtxyzFile(file("bad.xyz", "1\n\nH 0 0 0\nx\n\nH 0 0 0\n"), {}); });
  EXPECT_TRUE(has(bad, "bad.xyz:line 4") && has(bad, "expected the number of atoms")) << bad;
  const std::string cut = error_of([&] { ExtxyzFile(file("cut.xyz", "1\n\nH 0 0 0\n3\n\nH 0 0 0\n"), {}); });
  EXPECT_TRUE(has(cut, "cut.xyz") && has(cut, "frame 1") && has(cut, "ends inside the frame")) << cut;
  const std::string atom = error_of([&] { ExtxyzFile(file("atom.xyz", "2\n\nH 0 0 0\nH 0 zero 0\n"), {}).frame(0); });
  EXPECT_TRUE(has(atom, "atom.xyz:line 4") && has(atom, "position")) << atom;
}

TEST_F(Extxyz, CommentLineForms) {
  // Quoted, braced and bare values, spaces around '=', a bare flag, extra columns skipped by width,
  // Z instead of species, `force`, Voigt stress (xx yy zz yz xz xy), partial pbc, weight.
  const std::string f = file("forms.xyz",
                             "2\n"
                             "Lattice=\"2 0 0 0 2 0 0 0 2\" Properties=Z:I:1:tag:I:1:pos:R:3:q:R:2:force:R:3 "
                             "energy = -1.5 stress={1 2 3 4 5 6} pbc=\"T T F\" weight=2.5 relaxed "
                             "free_energy=99 comment='x y'\n"
                             "8 7 0 0 0 0.1 0.2 1 2 3\n"
                             "1 7 0.5 0.5 0.5 0.1 0.2 -1 -2 -3\n");
  const Structure s = read_extxyz(f).at(0);
  EXPECT_EQ(s.numbers, (std::vector<int>{8, 1}));
  expect_vec_eq(s.positions[1], {0.5, 0.5, 0.5});
  expect_vec_eq(s.forces[0], {1, 2, 3});
  EXPECT_EQ(*s.energy, -1.5);
  EXPECT_EQ(s.weight, 2.5);
  EXPECT_EQ(s.cell.pbc, (std::array<bool, 3>{true, true, false}));
  // stress (eV/Å^3, ASE sign) -> virial = -stress * V with V = 8
  const Mat3 w = *s.virial;
  EXPECT_EQ(w[0][0], -8.0);
  EXPECT_EQ(w[1][1], -16.0);
  EXPECT_EQ(w[2][2], -24.0);
  EXPECT_EQ(w[1][2], -32.0);
  EXPECT_EQ(w[0][2], -40.0);
  EXPECT_EQ(w[0][1], -48.0);
  EXPECT_EQ(w[1][0], -48.0);
}

TEST_F(Extxyz, DefaultsWithoutPropertiesAndPbc) {
  const Structure s = read_extxyz(file("plain.xyz", "1\nLattice=\"3 0 0 0 3 0 0 0 3\"\nAr 1 2 3\n")).at(0);
  EXPECT_EQ(s.numbers, (std::vector<int>{18}));
  EXPECT_EQ(s.cell.pbc, (std::array<bool, 3>{true, true, true}));  // Lattice present
  EXPECT_FALSE(s.energy.has_value());
  EXPECT_FALSE(s.has_forces());
  const Structure g = read_extxyz(file("gas.xyz", "1\njust a title\nAr 1 2 3\n\n")).at(0);
  EXPECT_FALSE(g.cell.any_periodic());
  const Structure p =
      read_extxyz(file("pbcf.xyz", "1\nLattice=\"3 0 0 0 3 0 0 0 3\" pbc=F\nAr 1 2 3\n")).at(0);
  EXPECT_FALSE(p.cell.any_periodic());  // one value applies to all directions, as in ASE
}

TEST_F(Extxyz, MissingPosColumn) {
  const std::string f = file("bad.xyz", "1\nProperties=species:S:1:forces:R:3\nH 0 0 0\n");
  expect_contains(error_of([&] { read_extxyz(f); }), {"bad.xyz:line 2", "frame 0", "no pos column"});
}

TEST_F(Extxyz, AtomCountLargerThanAtomLines) {
  const std::string f = file("bad.xyz",
                             "3\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 0 1\n"
                             "1\nProperties=species:S:1:pos:R:3\nH 0 0 0\n");
  expect_contains(error_of([&] { read_extxyz(f); }),
                  {"bad.xyz:line 5", "frame 0", "1 columns, Properties declares 4", "line 1"});
}

TEST_F(Extxyz, AtomCountSmallerThanAtomLines) {
  const std::string f = file("bad.xyz",
                             "1\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 0 1\n"
                             "1\nProperties=species:S:1:pos:R:3\nH 0 0 0\n");
  expect_contains(error_of([&] { read_extxyz(f); }),
                  {"bad.xyz:line 4", "frame 1", "expected the number of atoms", "previous frame"});
}

TEST_F(Extxyz, TruncatedFile) {
  const std::string f = file("bad.xyz", "3\nProperties=species:S:1:pos:R:3\nH 0 0 0\nH 0 0 1\n");
  expect_contains(error_of([&] { read_extxyz(f); }),
                  {"bad.xyz:line 5", "frame 0", "2 of 3 atom lines", "truncated"});
  const std::string g = file("short.xyz", "3\n");
  expect_contains(error_of([&] { read_extxyz(g); }), {"short.xyz:line 2", "before the comment line"});
  const std::string empty = file("empty.xyz", "\n");
  expect_contains(error_of([&] { read_extxyz(empty); }), {"empty.xyz", "no frames"});
}

TEST_F(Extxyz, UnparseableAndNonFiniteNumbers) {
  const std::string f = file("bad.xyz", "1\nenergy=1\nH 0 abc 0\n");
  expect_contains(error_of([&] { read_extxyz(f); }), {"bad.xyz:line 3", "frame 0", "'abc'", "position"});
  const std::string g = file("nan.xyz", "1\nenergy=1\nH 0 0 0\n1\nenergy=1\nH 0 nan 0\n");
  expect_contains(error_of([&] { read_extxyz(g); }), {"nan.xyz:line 6", "frame 1", "non-finite", "'nan'"});
  const std::string h = file("inf.xyz", "1\nenergy=inf\nH 0 0 0\n");
  expect_contains(error_of([&] { read_extxyz(h); }), {"inf.xyz:line 2", "non-finite", "energy"});
  const std::string k = file("count.xyz", "two\nenergy=1\nH 0 0 0\n");
  expect_contains(error_of([&] { read_extxyz(k); }), {"count.xyz:line 1", "expected the number of atoms"});
}

TEST_F(Extxyz, UnknownElement) {
  const std::string f = file("bad.xyz", "2\n\nH 0 0 0\nXx 0 0 1\n");
  expect_contains(error_of([&] { read_extxyz(f); }), {"bad.xyz:line 4", "frame 0", "unknown element 'Xx'"});
  const std::string g = file("z.xyz", "1\nProperties=Z:I:1:pos:R:3\n200 0 0 0\n");
  expect_contains(error_of([&] { read_extxyz(g); }), {"z.xyz:line 3", "unknown element", "200"});
}

TEST_F(Extxyz, SingularCell) {
  const std::string f = file("bad.xyz", "1\nLattice=\"1 0 0 2 0 0 0 0 1\"\nH 0 0 0\n");
  expect_contains(error_of([&] { read_extxyz(f); }), {"bad.xyz:frame 0", "singular", "line 1"});
}

TEST_F(Extxyz, MalformedKeys) {
  expect_contains(error_of([&] { read_extxyz(file("a.xyz", "1\nLattice=\"1 0 0 0 1 0 0 0\"\nH 0 0 0\n")); }),
                  {"a.xyz:line 2", "Lattice has 8 values, expected 9"});
  expect_contains(error_of([&] { read_extxyz(file("b.xyz", "1\npbc=\"T T\"\nH 0 0 0\n")); }),
                  {"b.xyz:line 2", "pbc has 2 values"});
  expect_contains(error_of([&] { read_extxyz(file("c.xyz", "1\nstress=\"1 2 3 4 5 6\"\nH 0 0 0\n")); }),
                  {"c.xyz:line 2", "stress", "no volume"});
  expect_contains(error_of([&] { read_extxyz(file("d.xyz", "1\nProperties=species:S:1:pos:R\nH 0 0 0\n")); }),
                  {"d.xyz:line 2", "triples"});
  expect_contains(error_of([&] { read_extxyz(file("e.xyz", "1\nProperties=species:S:1:pos:R:2\nH 0 0\n")); }),
                  {"e.xyz:line 2", "pos:R:3"});
  expect_contains(error_of([&] { read_extxyz(file("f.xyz", "1\ncomment=\"unterminated\nH 0 0 0\n")); }),
                  {"f.xyz:line 2", "unterminated"});
  expect_contains(error_of([&] {
                    read_extxyz(file("g.xyz",
                                     "1\nLattice=\"2 0 0 0 2 0 0 0 2\" stress=\"1 0 0 0 1 0 0 0 1\" "
                                     "virial=\"1 0 0 0 1 0 0 0 1\"\nH 0 0 0\n"));
                  }),
                  {"g.xyz:line 2", "disagree"});
}

TEST_F(Extxyz, ConsistentVirialAndStressAreAccepted) {
  const Structure s = read_extxyz(file("ok.xyz",
                                       "1\nLattice=\"2 0 0 0 2 0 0 0 2\" stress=\"1 0 0 0 1 0 0 0 1\" "
                                       "virial=\"-8 0 0 0 -8 0 0 0 -8\"\nH 0 0 0\n"))
                          .at(0);
  EXPECT_EQ((*s.virial)[2][2], -8.0);
}

Structure random_frame(std::mt19937& rng, int n, bool periodic, bool labelled) {
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Structure s;
  s.cell.lattice = {{{7.3 + u(rng), 0.1 * u(rng), 0.2 * u(rng)},
                     {1.7 * u(rng), 8.1 + u(rng), 0.3 * u(rng)},
                     {0.9 * u(rng), -2.2 * u(rng), 6.6 + u(rng)}}};
  s.cell.pbc = {periodic, periodic, periodic};
  if (!periodic) s.cell.lattice = {};
  for (int i = 0; i < n; ++i) {
    s.positions.push_back({5 * u(rng), 5 * u(rng), 1e-7 * u(rng)});
    s.numbers.push_back(1 + static_cast<int>(std::abs(u(rng)) * 117.99));
    if (labelled) s.forces.push_back({u(rng), 1e3 * u(rng), 1e-9 * u(rng)});
  }
  if (labelled) {
    s.energy = -1234.5 * u(rng);
    Mat3 w{};
    for (auto& row : w) {
      for (double& x : row) x = 50 * u(rng);  // not symmetric, so that the 3x3 order is tested
    }
    s.virial = w;
    s.weight = 0.25 + std::abs(u(rng));
  }
  return s;
}

// Round trips are exact, virials included.
void expect_same_frames(const std::vector<Structure>& a, const std::vector<Structure>& b) {
  testing::expect_same_frames(a, b, /*virial_tolerance=*/0.0);
}

std::vector<Structure> round_trip_frames() {
  std::mt19937 rng(11);
  std::vector<Structure> frames = {random_frame(rng, 5, true, true), random_frame(rng, 3, false, false),
                                   random_frame(rng, 7, false, true)};
  Structure slab = random_frame(rng, 4, true, true);  // periodic in x and y only, no c vector
  slab.cell.pbc = {true, true, false};
  slab.cell.lattice[2] = {0, 0, 0};
  frames.push_back(slab);
  return frames;
}

TEST_F(Extxyz, WriteReadRoundTripIsExact) {
  const std::vector<Structure> frames = round_trip_frames();
  const std::string f = path("round.xyz");
  write_extxyz(f, frames);
  expect_same_frames(frames, read_extxyz(f));
  EXPECT_FALSE(fs::exists(f + ".tmp"));

  // Overwriting replaces the file.
  write_extxyz(f, {frames[1]});
  expect_same_frames({frames[1]}, read_extxyz(f));

  // A real data set survives too, after unit conversion.
  ReadOptions kcal;
  kcal.units.energy = "kcal/mol";
  const std::vector<Structure> ethanol = read_extxyz(data("ethanol-rmd17/rmd17_ethanol_1000.xyz"), kcal);
  write_extxyz(f, ethanol);
  expect_same_frames(ethanol, read_extxyz(f));
  const std::vector<Structure> ta = read_fitsnap_json(data("ta-fitsnap/JSON/Elastic_FCC"));
  write_extxyz(f, ta);
  expect_same_frames(ta, read_extxyz(f));
}

TEST_F(Extxyz, AWriterFrameByFrameWritesTheSameFileOrLeavesTheOldOne) {
  const std::vector<Structure> frames = round_trip_frames();
  const std::string whole = path("whole.xyz"), by_frame = path("by_frame.xyz");
  write_extxyz(whole, frames);
  {
    ExtxyzWriter w(by_frame);
    for (const Structure& s : frames) w.add(s);
    EXPECT_FALSE(fs::exists(by_frame));   // not before finish()
    w.finish();
  }
  const auto text = [](const std::string& f) {
    std::ifstream in(f, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(text(by_frame), text(whole));
  EXPECT_FALSE(fs::exists(by_frame + ".tmp"));
  // An invalid frame half-way: the error names the file and the frame; unfinished, the writer
  // leaves the old file as it was and no .tmp.
  Structure bad = frames[0];
  bad.forces.pop_back();
  expect_contains(error_of([&] {
                    ExtxyzWriter w(by_frame);
                    w.add(frames[1]);
                    w.add(bad);
                  }),
                  {"by_frame.xyz", "frame 1", "forces"});
  EXPECT_EQ(text(by_frame), text(whole));
  EXPECT_FALSE(fs::exists(by_frame + ".tmp"));
}

TEST_F(Extxyz, WriteRejectsInvalidFramesAndKeepsTheOldFile) {
  const std::string f = path("keep.xyz");
  write_extxyz(f, round_trip_frames());
  Structure bad = round_trip_frames()[0];
  bad.forces.pop_back();
  expect_contains(error_of([&] { write_extxyz(f, {bad}); }), {"keep.xyz", "frame 0", "forces"});
  EXPECT_EQ(read_extxyz(f).size(), 4u);
  expect_contains(error_of([&] { write_extxyz(path("no/such/dir/x.xyz"), round_trip_frames()); }), {"x.xyz"});
}

// ---------------------------------------------------------------------------------------------
// DeePMD

// A minimal .npy file.
void write_npy(const fs::path& p, const std::string& descr, const std::vector<std::size_t>& shape,
               const void* bytes, std::size_t n_bytes, bool fortran = false, int version = 1) {
  std::string shape_text = "(";
  for (std::size_t i = 0; i < shape.size(); ++i) shape_text += (i ? ", " : "") + std::to_string(shape[i]);
  shape_text += shape.size() == 1 ? ",)" : ")";
  std::string header = "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
                       ", 'shape': " + shape_text + ", }";
  const std::size_t prefix = version == 1 ? 10 : 12;
  while ((prefix + header.size() + 1) % 64 != 0) header += ' ';
  header += '\n';
  std::string out = "\x93NUMPY";
  out += static_cast<char>(version);
  out += '\0';
  const std::size_t len = header.size();
  out += static_cast<char>(len & 0xff);
  out += static_cast<char>((len >> 8) & 0xff);
  if (version != 1) out += std::string(2, '\0');
  out += header;
  out.append(static_cast<const char*>(bytes), n_bytes);
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << out;
}

void write_f8(const fs::path& p, const std::vector<std::size_t>& shape, const std::vector<double>& v) {
  write_npy(p, "<f8", shape, v.data(), v.size() * sizeof(double));
}

class Deepmd : public TempDir {
 protected:
  // Two frames of an O-H pair in a 5 Å cube.
  std::string make_system(const std::string& name = "sys") {
    const fs::path d = dir_ / name;
    fs::create_directories(d / "set.000");
    std::ofstream(d / "type_map.raw") << "O\nH\n";
    std::ofstream(d / "type.raw") << "0\n1\n";
    write_f8(d / "set.000/box.npy", {2, 9}, {5, 0, 0, 0, 5, 0, 0, 0, 5, 5, 0, 0, 0, 5, 0, 0, 0, 5});
    write_f8(d / "set.000/coord.npy", {2, 6}, {0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0});
    write_f8(d / "set.000/energy.npy", {2}, {-1.0, -2.0});
    write_f8(d / "set.000/force.npy", {2, 6}, {1, 2, 3, -1, -2, -3, 4, 5, 6, -4, -5, -6});
    return d.string();
  }
};

TEST_F(Deepmd, SmallSystemWithVirialAndOtherDtypes) {
  const std::string d = make_system();
  std::vector<float> virial(18);
  for (int i = 0; i < 18; ++i) virial[i] = static_cast<float>(i) - 4.5f;
  write_npy(fs::path(d) / "set.000/virial.npy", "<f4", {2, 9}, virial.data(), virial.size() * 4);
  // A second set with int64 coordinates and a version-2 header.
  const std::vector<std::int64_t> coord = {0, 0, 0, 0, 0, 2};
  write_npy(fs::path(d) / "set.001/coord.npy", "<i8", {1, 6}, coord.data(), 48, false, 2);
  const std::vector<std::int32_t> box = {4, 0, 0, 0, 4, 0, 0, 0, 4};
  write_npy(fs::path(d) / "set.001/box.npy", "<i4", {1, 9}, box.data(), 36);

  const std::vector<Structure> frames = read_deepmd(d);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].numbers, (std::vector<int>{8, 1}));
  EXPECT_EQ(*frames[1].energy, -2.0);
  expect_vec_eq(frames[1].positions[1], {0, 1, 0});
  expect_vec_eq(frames[1].forces[0], {4, 5, 6});
  EXPECT_EQ((*frames[1].virial)[0][1], 10.0 - 4.5);  // row-major (nframes, 9), eV, same sign
  EXPECT_EQ((*frames[0].virial)[2][2], 8.0 - 4.5);
  EXPECT_EQ(frames[2].origin, d + ":frame 2");
  expect_vec_eq(frames[2].positions[1], {0, 0, 2});
  EXPECT_EQ(frames[2].cell.lattice[1][1], 4.0);
  EXPECT_FALSE(frames[2].energy.has_value());
  EXPECT_FALSE(frames[2].has_forces());
}

TEST_F(Deepmd, NopbcSystemsAreOpen) {
  const std::string d = make_system();
  std::ofstream(fs::path(d) / "nopbc");
  fs::remove(fs::path(d) / "set.000/box.npy");
  const std::vector<Structure> frames = read_deepmd(d);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_FALSE(frames[0].cell.any_periodic());
}

TEST_F(Deepmd, MissingFiles) {
  std::string d = make_system("a");
  fs::remove(fs::path(d) / "type.raw");
  expect_contains(error_of([&] { read_deepmd(d); }), {"type.raw", "missing"});
  d = make_system("b");
  fs::remove(fs::path(d) / "type_map.raw");
  expect_contains(error_of([&] { read_deepmd(d); }), {"type_map.raw", "missing"});
  d = make_system("c");
  fs::remove(fs::path(d) / "set.000/coord.npy");
  expect_contains(error_of([&] { read_deepmd(d); }), {"set.000/coord.npy", "missing"});
  d = make_system("d");
  fs::remove(fs::path(d) / "set.000/box.npy");
  expect_contains(error_of([&] { read_deepmd(d); }), {"set.000/box.npy", "missing"});
  d = make_system("e");
  fs::remove_all(fs::path(d) / "set.000");
  expect_contains(error_of([&] { read_deepmd(d); }), {"no set.* folders"});
}

TEST_F(Deepmd, WrongShapes) {
  std::string d = make_system("a");
  write_f8(fs::path(d) / "set.000/coord.npy", {2, 7}, std::vector<double>(14, 0.0));
  expect_contains(error_of([&] { read_deepmd(d); }),
                  {"set.000/coord.npy", "shape (2, 7)", "expected (nframes, 6)", "2 atoms"});
  d = make_system("b");
  write_f8(fs::path(d) / "set.000/energy.npy", {3}, {1, 2, 3});
  expect_contains(error_of([&] { read_deepmd(d); }),
                  {"set.000/energy.npy", "shape (3,)", "3 frames", "coord.npy has 2"});
  d = make_system("c");
  write_f8(fs::path(d) / "set.000/box.npy", {2, 3, 3}, std::vector<double>(18, 1.0));
  expect_contains(error_of([&] { read_deepmd(d); }), {"set.000/box.npy", "shape (2, 3, 3)", "(nframes, 9)"});
  d = make_system("d");
  write_f8(fs::path(d) / "set.000/force.npy", {1, 6}, std::vector<double>(6, 1.0));
  expect_contains(error_of([&] { read_deepmd(d); }), {"set.000/force.npy", "(1, 6)", "1 frames"});
}

TEST_F(Deepmd, TypesAndElements) {
  std::string d = make_system("a");
  std::ofstream(fs::path(d) / "type_map.raw") << "O\nXx\n";
  expect_contains(error_of([&] { read_deepmd(d); }), {"type_map.raw:line 2", "unknown element 'Xx'"});
  d = make_system("b");
  std::ofstream(fs::path(d) / "type.raw") << "0\n2\n";
  expect_contains(error_of([&] { read_deepmd(d); }), {"type.raw:line 2", "atom type 2", "2 types"});
  d = make_system("c");
  std::ofstream(fs::path(d) / "type.raw") << "0\nH\n";
  expect_contains(error_of([&] { read_deepmd(d); }), {"type.raw:line 2", "'H'"});
}

TEST_F(Deepmd, NonFiniteValuesAndSingularCells) {
  std::string d = make_system("a");
  write_f8(fs::path(d) / "set.000/coord.npy", {2, 6}, {0, 0, 0, 1, 0, 0, 0, 0, 0, 0, std::nan(""), 0});
  expect_contains(error_of([&] { read_deepmd(d); }),
                  {d + ":frame 1", "non-finite position", "set.000 row 1"});
  d = make_system("b");
  write_f8(fs::path(d) / "set.000/box.npy", {2, 9}, {5, 0, 0, 0, 5, 0, 0, 0, 5, 5, 0, 0, 5, 0, 0, 0, 0, 5});
  expect_contains(error_of([&] { read_deepmd(d); }), {d + ":frame 1", "singular"});
}

TEST_F(Deepmd, NpyFormatErrors) {
  const std::vector<double> v(18, 1.0);
  const fs::path base = dir_ / "npy";
  write_npy(base / "fortran.npy", "<f8", {2, 9}, v.data(), 144, true);
  expect_contains(error_of([&] { read_npy((base / "fortran.npy").string()); }), {"fortran.npy", "Fortran"});
  write_npy(base / "big.npy", ">f8", {2, 9}, v.data(), 144);
  expect_contains(error_of([&] { read_npy((base / "big.npy").string()); }), {"big.npy", "big-endian", ">f8"});
  write_npy(base / "half.npy", "<f2", {2}, v.data(), 4);
  expect_contains(error_of([&] { read_npy((base / "half.npy").string()); }),
                  {"half.npy", "unsupported dtype"});
  write_npy(base / "long.npy", "<f8", {2, 8}, v.data(), 144);  // header declares 16 values, 18 follow
  expect_contains(error_of([&] { read_npy((base / "long.npy").string()); }),
                  {"long.npy", "declares shape (2, 8)", "128 bytes", "holds 144 bytes"});
  write_npy(base / "short.npy", "<f8", {2, 9}, v.data(), 100);
  expect_contains(error_of([&] { read_npy((base / "short.npy").string()); }),
                  {"short.npy", "truncated", "(2, 9)", "144 bytes", "100"});
  std::ofstream(base / "text.npy") << "not numpy at all";
  expect_contains(error_of([&] { read_npy((base / "text.npy").string()); }), {"text.npy", "not a .npy"});
  // The error surfaces through read_deepmd with the file name.
  const std::string d = make_system();
  write_npy(fs::path(d) / "set.000/force.npy", "<f8", {2, 6}, v.data(), 96, true);
  expect_contains(error_of([&] { read_deepmd(d); }), {"set.000/force.npy", "Fortran"});
}

TEST_F(Deepmd, ReadStructuresFindsSystemsBelowADirectory) {
  make_system("x/sys2");
  make_system("x/sys1");
  EXPECT_EQ(detect_format(path("x")), "deepmd");
  const std::vector<Structure> frames = read_structures(path("x"));
  ASSERT_EQ(frames.size(), 4u);
  EXPECT_EQ(frames[0].origin, path("x/sys1") + ":frame 0");
  EXPECT_EQ(frames[3].origin, path("x/sys2") + ":frame 1");
}

// ---------------------------------------------------------------------------------------------
// n2p2

using N2p2 = TempDir;

const char* kN2p2Frame =
    "begin\n"
    "comment a frame\n"
    "lattice 5.0 0.0 0.0\n"
    "lattice 0.0 5.0 0.0\n"
    "lattice 0.0 0.0 5.0\n"
    "atom 0.0 0.0 0.0 Cu 0.0 0.0 0.1 0.2 0.3\n"
    "atom 1.0 1.0 1.0 S 0.0 0.0 -0.1 -0.2 -0.3\n"
    "energy -7.5\n"
    "charge 0.0\n"
    "end\n";

// ---------------------------------------------------------------------------------------------
// LAMMPS dumps

using LammpsDump = TempDir;

// A triclinic box with a = (9, 0, 0), b = (1, 9.5, 0), c = (-0.8, 0.6, 10) from x, y, z = 1, 2, 3, as
// LAMMPS writes it: the bounding box (lo - min(0, xy, xz, xy + xz), ...) and the tilts.
constexpr const char* kTriclinicDump =
    "ITEM: TIMESTEP\n20\nITEM: NUMBER OF ATOMS\n2\nITEM: BOX BOUNDS xy xz yz pp pp pp\n"
    "0.2 11 1\n2 12.1 -0.8\n3 13 0.6\nITEM: ATOMS id type x y z fx fy fz\n"
    "1 1 1.5 2.5 3.5 0 0 0\n2 2 2 2 3 1 1 1\n";

TEST_F(LammpsDump, TriclinicBoxTypesAndScaledPositions) {
  const std::string f = file("md.dump", kTriclinicDump);
  EXPECT_EQ(detect_format(f), "lammps-dump");
  ReadOptions o;
  o.type_elements = {"O", "H"};
  const std::vector<Structure> frames = read_structures(f, "auto", o);
  ASSERT_EQ(frames.size(), 1u);
  const Structure& s = frames[0];
  const Mat3 expected = {{{9, 0, 0}, {1, 9.5, 0}, {-0.8, 0.6, 10}}};
  for (int a = 0; a < 3; ++a) expect_vec_eq(s.cell.lattice[a], expected[a]);
  EXPECT_EQ(s.numbers, (std::vector<int>{8, 1}));
  expect_vec_eq(s.positions[0], {0.5, 0.5, 0.5});
  expect_vec_eq(s.positions[1], {1, 0, 0});
  EXPECT_FALSE(s.has_forces()) << "a dump's forces are a model's, not labels";
  // The same atoms as scaled coordinates with elements, orthogonal box, two frames, open z.
  const std::string g = file("scaled.lammpstrj",
                             "ITEM: TIMESTEP\n0\nITEM: NUMBER OF ATOMS\n1\nITEM: BOX BOUNDS pp pp fm\n0 4\n0 5\n0 6\n"
                             "ITEM: ATOMS element xs ys zs\nC 0.25 0.5 0.5\n"
                             "ITEM: TIMESTEP\n10\nITEM: NUMBER OF ATOMS\n1\nITEM: BOX BOUNDS pp pp fm\n0 4\n0 5\n0 6\n"
                             "ITEM: ATOMS element xs ys zs\nN 0.5 0.5 0.5\n");
  const std::vector<Structure> two = read_structures(g);
  ASSERT_EQ(two.size(), 2u);
  expect_vec_eq(two[0].positions[0], {1, 2.5, 3});
  EXPECT_EQ(two[1].numbers[0], 7);
  EXPECT_FALSE(two[1].cell.pbc[2]);
  EXPECT_EQ(two[1].origin, g + ":frame 1");
}

TEST_F(LammpsDump, ErrorsNameTheLine) {
  const auto check = [&](const std::string& name, const std::string& text, const ReadOptions& o, const std::string& part) {
    const std::string f = file(name, text);
    try {
      read_lammps_dump(f, o);
      ADD_FAILURE() << name << ": no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << name << ": " << e.what();
    }
  };
  ReadOptions types;
  types.type_elements = {"O"};
  check("no_types.dump", kTriclinicDump, ReadOptions{}, "no_types.dump:line 9: the atoms have types but no elements");
  check("type2.dump", kTriclinicDump, types, "type2.dump:line 11: atom type 2 has no element (--types gives 1)");
  std::string cut = kTriclinicDump;
  cut.resize(cut.size() - 8);    // "2 2 2 2 "
  ReadOptions both;
  both.type_elements = {"O", "H"};
  check("cut.dump", cut, both, "cut.dump:line 11: 4 columns, the ATOMS line names 8");
  check("short.dump", "ITEM: TIMESTEP\n0\nITEM: NUMBER OF ATOMS\n3\n", ReadOptions{}, "the file ends inside a frame");
  check("nox.dump", "ITEM: TIMESTEP\n0\nITEM: NUMBER OF ATOMS\n1\nITEM: BOX BOUNDS pp pp pp\n0 4\n0 5\n0 6\n"
                    "ITEM: ATOMS id element\n1 C\n", ReadOptions{}, "the atoms need positions");
}

TEST_F(N2p2, NonPeriodicFramesAndLineNumbers) {
  const std::string f =
      file("input.data", std::string(kN2p2Frame) + "begin\natom 0 0 0 H 0 0 1 2 3\nenergy 1\nend\n");
  EXPECT_EQ(detect_format(f), "n2p2");
  const std::vector<Structure> frames = read_structures(f);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_TRUE(frames[0].cell.any_periodic());
  EXPECT_FALSE(frames[1].cell.any_periodic());
  EXPECT_EQ(frames[1].origin, f + ":frame 1");
}

TEST_F(N2p2, Errors) {
  const auto check = [&](const std::string& name, const std::string& text,
                         std::initializer_list<std::string> parts) {
    const std::string f = file(name, text);
    expect_contains(error_of([&] { read_n2p2(f); }), parts);
  };
  check("trunc.data", std::string(kN2p2Frame) + "begin\natom 0 0 0 H 0 0 1 2 3\n",
        {"trunc.data:line 11", "frame 1", "no 'end'", "truncated"});
  check("cols.data", "begin\natom 0 0 0 H 0 0 1 2\nenergy 1\nend\n",
        {"cols.data:line 2", "frame 0", "8 values, expected 9"});
  check("elem.data", "begin\natom 0 0 0 Qq 0 0 1 2 3\nenergy 1\nend\n",
        {"elem.data:line 2", "unknown element 'Qq'"});
  check("num.data", "begin\natom 0 0 0 H 0 0 1 2 x3\nenergy 1\nend\n", {"num.data:line 2", "'x3'", "force"});
  check("nan.data", "begin\natom 0 0 0 H 0 0 1 2 3\nenergy nan\nend\n", {"nan.data:line 3", "non-finite"});
  check("noenergy.data", "begin\natom 0 0 0 H 0 0 1 2 3\nend\n", {"noenergy.data:line 3", "no 'energy'"});
  check("lat.data", "begin\nlattice 1 0 0\nlattice 0 1 0\natom 0 0 0 H 0 0 1 2 3\nenergy 1\nend\n",
        {"lat.data:line 6", "2 lattice lines"});
  check("sing.data",
        "begin\nlattice 1 0 0\nlattice 2 0 0\nlattice 0 0 1\natom 0 0 0 H 0 0 1 2 3\nenergy 1\nend\n",
        {"sing.data:frame 0", "singular", "line 1"});
  check("key.data", "begin\nforces 1 2 3\nend\n", {"key.data:line 2", "unknown keyword 'forces'"});
  check("begin.data", "begin\natom 0 0 0 H 0 0 1 2 3\nbegin\n", {"begin.data:line 3", "missing 'end'"});
  check("outside.data", "atom 0 0 0 H 0 0 1 2 3\n", {"outside.data:line 1", "expected 'begin'"});
  check("noatoms.data", "begin\nenergy 1\nend\n", {"noatoms.data:line 3", "no atom lines"});
}

// ---------------------------------------------------------------------------------------------
// FitSNAP JSON

using Fitsnap = TempDir;

std::string fitsnap_text(const std::string& config, const std::string& styles = "\"StressStyle\": \"bar\"") {
  return "# A test JSON file for QM data\n{\"Dataset\": {\"Data\": [" + config + "], " + styles + "}}\n";
}

const char* kTaConfig =
    "{\"Positions\": [[0, 0, 0], [1.5, 1.5, 1.5]], \"AtomTypes\": [\"Ta\", \"Ta\"], \"NumAtoms\": 2, "
    "\"Lattice\": [[3, 0, 0], [0, 3, 0], [0, 0, 3]], \"Energy\": -23.7, "
    "\"Forces\": [[0.1, 0, 0], [-0.1, 0, 0]], \"Stress\": [[1000, 0, 0], [0, 1000, 0], [0, 0, 1000]]}";

TEST_F(Fitsnap, StylesSelectTheStressUnit) {
  const Structure bar = read_fitsnap_json(file("bar.json", fitsnap_text(kTaConfig))).at(0);
  EXPECT_NEAR((*bar.virial)[0][0], 1000 * kBar * 27, 1e-9 * 1000 * kBar * 27);
  const Structure gpa =
      read_fitsnap_json(file("gpa.json", fitsnap_text(kTaConfig, "\"StressStyle\": \"GPa\""))).at(0);
  EXPECT_NEAR((*gpa.virial)[0][0], 1000 * 1e4 * kBar * 27, 1e-9 * 1000 * 1e4 * kBar * 27);
  ReadOptions options;
  options.units.stress = "kbar";
  const Structure kbar =
      read_fitsnap_json(file("none.json", fitsnap_text(kTaConfig, "\"Label\": \"x\"")), options).at(0);
  EXPECT_NEAR((*kbar.virial)[0][0], 1000 * 1e3 * kBar * 27, 1e-9 * 1000 * 1e3 * kBar * 27);
}

TEST_F(Fitsnap, StyleMismatchesAreErrors) {
  ReadOptions options;
  options.units.stress = "GPa";
  const std::string f = file("bar.json", fitsnap_text(kTaConfig));
  expect_contains(error_of([&] { read_fitsnap_json(f, options); }), {"bar.json", "StressStyle", "GPa"});
  const std::string g = file("bohr.json", fitsnap_text(kTaConfig, "\"PositionsStyle\": \"bohr\""));
  expect_contains(error_of([&] { read_fitsnap_json(g); }), {"bohr.json", "PositionsStyle", "bohr"});
  ReadOptions atomic;
  atomic.units.length = "bohr";
  EXPECT_NO_THROW(read_fitsnap_json(g, atomic));
  const std::string h = file("f.json", fitsnap_text(kTaConfig, "\"ForcesStyle\": \"furlongperfortnight\""));
  expect_contains(error_of([&] { read_fitsnap_json(h); }), {"f.json", "unknown ForcesStyle"});
}

TEST_F(Fitsnap, Errors) {
  const auto check = [&](const std::string& name, const std::string& config,
                         std::initializer_list<std::string> parts) {
    const std::string f = file(name, fitsnap_text(config));
    expect_contains(error_of([&] { read_fitsnap_json(f); }), parts);
  };
  const std::string ta = kTaConfig;
  const auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = ta;
    const std::size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  check("nopos.json", replace("\"Positions\": [[0, 0, 0], [1.5, 1.5, 1.5]], ", ""),
        {"nopos.json:frame 0", "missing required field \"Positions\""});
  check("nolat.json", replace("\"Lattice\": [[3, 0, 0], [0, 3, 0], [0, 0, 3]], ", ""),
        {"nolat.json:frame 0", "\"Lattice\""});
  check("count.json", replace("\"NumAtoms\": 2", "\"NumAtoms\": 3"),
        {"count.json:frame 0", "NumAtoms is 3 but Positions has 2 rows"});
  check("types.json", replace("[\"Ta\", \"Ta\"]", "[\"Ta\"]"), {"types.json:frame 0", "AtomTypes has 1"});
  check("forces.json", replace("[[0.1, 0, 0], [-0.1, 0, 0]]", "[[0.1, 0, 0]]"),
        {"forces.json:frame 0", "Forces has 1 rows, expected 2"});
  check("elem.json", replace("[\"Ta\", \"Ta\"]", "[\"Ta\", \"Zz\"]"),
        {"elem.json:frame 0", "unknown element 'Zz'"});
  // A misspelt label would drop it silently: an error naming the key and the one meant.
  check("typo.json", replace("\"Forces\"", "\"Forcs\""),
        {"typo.json:frame 0", "unknown key \"Forcs\" (did you mean \"Forces\"?)"});
  check("case.json", replace("\"Energy\"", "\"energy\""), {"case.json:frame 0", "did you mean \"Energy\""});
  check("num.json", replace("[1.5, 1.5, 1.5]", "[1.5, \"x\", 1.5]"),
        {"num.json:frame 0", "Positions[1][1] is not a number"});
  check("row.json", replace("[1.5, 1.5, 1.5]", "[1.5, 1.5]"),
        {"row.json:frame 0", "Positions[1] is not 3 numbers"});
  check("sing.json", replace("[[3, 0, 0], [0, 3, 0], [0, 0, 3]]", "[[3, 0, 0], [6, 0, 0], [0, 0, 3]]"),
        {"sing.json:frame 0", "singular"});
  // JSON has no NaN or infinity: Python's NaN literal and an overflowing number are invalid JSON.
  check("nan.json", replace("\"Energy\": -23.7", "\"Energy\": NaN"), {"nan.json:line 2", "invalid JSON"});
  check("inf.json", replace("\"Energy\": -23.7", "\"Energy\": -1e999"), {"inf.json", "invalid JSON"});
  check("second.json", ta + ", " + replace("\"Ta\", \"Ta\"", "\"Ta\", \"X\""),
        {"second.json:frame 1", "'X'"});

  const std::string bad_json =
      file("syntax.json", "# comment\n{\"Dataset\": {\"Data\": [\n  {\"Positions\": [0, ]}]}}\n");
  expect_contains(error_of([&] { read_fitsnap_json(bad_json); }), {"syntax.json:line 3", "invalid JSON"});
  const std::string truncated = file("trunc.json", fitsnap_text(kTaConfig).substr(0, 120));
  expect_contains(error_of([&] { read_fitsnap_json(truncated); }), {"trunc.json:line 2", "invalid JSON"});
  const std::string no_dataset = file("nods.json", "# x\n{\"Data\": []}\n");
  expect_contains(error_of([&] { read_fitsnap_json(no_dataset); }), {"nods.json", "Dataset"});
  fs::create_directories(dir_ / "empty");
  expect_contains(error_of([&] { read_fitsnap_json(path("empty")); }), {"empty", "no *.json"});
}

// ---------------------------------------------------------------------------------------------
// Format detection

using Detect = TempDir;

TEST_F(Detect, NamesAndErrors) {
  EXPECT_EQ(detect_format(file("a.extxyz", "")), "extxyz");
  EXPECT_EQ(detect_format(file("b.XYZ", "")), "extxyz");
  EXPECT_EQ(detect_format(file("input.data.Cu2S", "")), "n2p2");
  EXPECT_EQ(detect_format(file("c.json", "")), "fitsnap");
  expect_contains(error_of([&] { detect_format(file("d.txt", "")); }), {"d.txt", "cannot tell the format"});
  expect_contains(error_of([&] { detect_format(path("missing.xyz")); }), {"missing.xyz", "no such file"});
  expect_contains(error_of([&] { read_structures(file("e.xyz", "1\n\nH 0 0 0\n"), "vasp"); }),
                  {"unknown data format 'vasp'", "e.xyz"});
  // An explicit format overrides the name.
  EXPECT_EQ(read_structures(file("f.txt", "1\n\nH 0 0 0\n"), "extxyz").size(), 1u);
}

// ---------------------------------------------------------------------------------------------
// ASE cross-check

class Ase : public TempDir {
 protected:
  void SetUp() override {
    TempDir::SetUp();
    if (!fs::exists(kPython))
      GTEST_SKIP() << kPython << " not found; the ASE cross-check needs Debian's python3-ase";
    const std::string probe = std::string(kPython) + " -c 'import ase, numpy' > /dev/null 2>&1";
    if (std::system(probe.c_str()) != 0) {
      GTEST_SKIP() << "ase/numpy cannot be imported by " << kPython << " (install python3-ase)";
    }
  }

  // Runs tests/python/ase_roundtrip.py MODE FILE and parses its JSON output.
  json run_script(const std::string& mode, const std::string& file) {
    const std::string script = source_dir() + "/tests/python/ase_roundtrip.py";
    const std::string out = path("ase.json"), err = path("ase.err");
    const std::string command = std::string(kPython) + " '" + script + "' " + mode + " '" + file + "' > '" +
                                out + "' 2> '" + err + "'";
    const int rc = std::system(command.c_str());
    std::ifstream in(out), err_in(err);
    std::stringstream stderr_text;
    stderr_text << err_in.rdbuf();
    EXPECT_EQ(rc, 0) << command << "\n" << stderr_text.str();
    if (rc != 0) return json::array();
    return json::parse(in);
  }

  static constexpr const char* kPython = "/usr/bin/python3";
};

void expect_close(double ours, double theirs, double scale, const std::string& what) {
  EXPECT_LE(std::abs(ours - theirs), 1e-12 * std::max(scale, 1e-300))
      << what << ": " << ours << " vs " << theirs;
}

void expect_matrix_close(const Mat3& ours, const json& theirs, const std::string& what) {
  double scale = 0.0;
  for (const Vec3& row : ours) {
    for (double x : row) scale = std::max(scale, std::abs(x));
  }
  for (int a = 0; a < 3; ++a) {
    for (int b = 0; b < 3; ++b) {
      expect_close(ours[a][b], theirs[a][b].get<double>(), scale,
                   what + "[" + std::to_string(a) + "][" + std::to_string(b) + "]");
    }
  }
}

void expect_frame_matches_ase(const Structure& s, const json& f) {
  SCOPED_TRACE(s.origin);
  ASSERT_EQ(f["numbers"].get<std::vector<int>>(), s.numbers);
  for (std::size_t i = 0; i < s.size(); ++i) {
    for (int d = 0; d < 3; ++d) {
      expect_close(s.positions[i][d], f["positions"][i][d].get<double>(), std::abs(s.positions[i][d]),
                   "position");
    }
  }
  expect_matrix_close(s.cell.lattice, f["cell"], "cell");
  EXPECT_EQ(f["pbc"].get<std::vector<bool>>(), std::vector<bool>(s.cell.pbc.begin(), s.cell.pbc.end()));
  ASSERT_EQ(!f["energy"].is_null(), s.energy.has_value());
  if (s.energy) expect_close(*s.energy, f["energy"].get<double>(), std::abs(*s.energy), "energy");
  ASSERT_EQ(!f["forces"].is_null(), s.has_forces());
  for (std::size_t i = 0; i < s.forces.size(); ++i) {
    for (int d = 0; d < 3; ++d) {
      expect_close(s.forces[i][d], f["forces"][i][d].get<double>(), std::abs(s.forces[i][d]), "force");
    }
  }
}

TEST_F(Ase, AseReadsWhatWeWrite) {
  const std::vector<Structure> frames = round_trip_frames();
  const std::string f = path("ours.xyz");
  write_extxyz(f, frames);
  const json ase = run_script("read", f);
  ASSERT_EQ(ase.size(), frames.size());
  for (std::size_t k = 0; k < frames.size(); ++k) {
    const Structure& s = frames[k];
    expect_frame_matches_ase(s, ase[k]);
    // ASE keeps our virial as a 3x3 info entry; equality shows the 3x3 flattening order agrees.
    ASSERT_EQ(!ase[k]["virial"].is_null(), s.virial.has_value());
    if (s.virial) expect_matrix_close(*s.virial, ase[k]["virial"], "virial");
    if (s.weight != 1.0) {
      EXPECT_EQ(ase[k]["weight"].get<double>(), s.weight);
    }
  }
}

TEST_F(Ase, WeReadWhatAseWritesWithAseStressSign) {
  // ASE labels Cu crystals with its EMT calculator and writes them (stress in its own sign, plus
  // free_energy and a per-atom energies column that we skip); the script converts ASE's stress to
  // a virial with W = -stress * V.
  const std::string f = path("emt.xyz");
  const json ase = run_script("emt", f);
  const std::vector<Structure> frames = read_extxyz(f);
  ASSERT_EQ(frames.size(), 3u);
  ASSERT_EQ(ase.size(), 3u);
  for (std::size_t k = 0; k < frames.size(); ++k) {
    expect_frame_matches_ase(frames[k], ase[k]);
    ASSERT_TRUE(frames[k].virial.has_value());
    expect_matrix_close(*frames[k].virial, ase[k]["virial_from_stress"], "virial");
  }
  // Frame 0 is compressed (a = 3.35 Å, EMT Cu's lattice constant is about 3.6 Å), frame 2
  // expanded (3.9 Å): mlip's virial is positive under compression.
  EXPECT_GT(trace(*frames[0].virial), 0.0);
  EXPECT_LT(trace(*frames[2].virial), 0.0);
}

}  // namespace
}  // namespace mlip
