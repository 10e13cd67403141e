// write_lammps_data: LAMMPS's triclinic convention (a along x, b in the xy plane), positions
// rotated with the cell so that all interatomic vectors keep their lengths, types by element.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "mlip/error.h"
#include "mlip/data/io.h"

namespace mlip {
namespace {

TEST(LammpsData, TriclinicCellIsRotatedIntoLammpsConvention) {
  Structure s;
  s.cell.lattice = {{{3.0, 1.0, 0.5}, {-0.5, 4.0, 1.0}, {0.2, -0.3, 5.0}}};
  s.cell.pbc = {true, true, true};
  s.positions = {{0.1, 0.2, 0.3}, {1.5, 2.0, 2.5}, {2.0, -0.5, 4.0}};
  s.numbers = {8, 1, 1};
  s.origin = "test";
  const std::string path = (std::filesystem::temp_directory_path() / "mlip_test.data").string();
  write_lammps_data(path, s, {"O", "H"});

  std::ifstream in(path);
  std::string line;
  double lo[3], hi[3], xy = 0, xz = 0, yz = 0;
  std::vector<std::array<double, 3>> x;
  std::vector<int> types;
  bool atoms = false;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    if (line.find("xlo xhi") != std::string::npos) ls >> lo[0] >> hi[0];
    if (line.find("ylo yhi") != std::string::npos) ls >> lo[1] >> hi[1];
    if (line.find("zlo zhi") != std::string::npos) ls >> lo[2] >> hi[2];
    if (line.find("xy xz yz") != std::string::npos) ls >> xy >> xz >> yz;
    if (line.rfind("Atoms", 0) == 0) atoms = true;
    int id, type;
    double a, b, c;
    if (atoms && (ls >> id >> type >> a >> b >> c)) {
      types.push_back(type);
      x.push_back({a, b, c});
    }
  }
  ASSERT_EQ(x.size(), 3u);
  EXPECT_EQ(types, (std::vector<int>{1, 2, 2}));
  // Cell vector lengths and volume are kept.
  EXPECT_NEAR(hi[0] - lo[0], norm(s.cell.lattice[0]), 1e-12);
  EXPECT_NEAR(std::hypot(xy, hi[1] - lo[1]), norm(s.cell.lattice[1]), 1e-12);
  EXPECT_NEAR(std::sqrt(xz * xz + yz * yz + (hi[2] - lo[2]) * (hi[2] - lo[2])), norm(s.cell.lattice[2]), 1e-12);
  EXPECT_NEAR((hi[0] - lo[0]) * (hi[1] - lo[1]) * (hi[2] - lo[2]), s.cell.volume(), 1e-10);
  // Interatomic distances are kept.
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) {
      const Vec3 d0 = {s.positions[i][0] - s.positions[j][0], s.positions[i][1] - s.positions[j][1],
                       s.positions[i][2] - s.positions[j][2]};
      const Vec3 d1 = {x[i][0] - x[j][0], x[i][1] - x[j][1], x[i][2] - x[j][2]};
      EXPECT_NEAR(norm(d0), norm(d1), 1e-12);
    }
  EXPECT_THROW(write_lammps_data(path, s, {"O"}), Error);  // H has no atom type
}

}  // namespace
}  // namespace mlip
