#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "mlip/data/elements.h"
#include "mlip/error.h"
#include "mlip/data/io.h"

namespace mlip {

void write_lammps_data(const std::string& path, const Structure& s, const std::vector<std::string>& type_elements,
                       double padding) {
  s.validate();
  std::vector<int> type_of_z(kMaxAtomicNumber + 1, 0);
  for (std::size_t t = 0; t < type_elements.size(); ++t) {
    const int z = atomic_number(type_elements[t]);
    if (z == 0) throw Error(path + ": '" + type_elements[t] + "' is not an element");
    type_of_z[z] = static_cast<int>(t) + 1;
  }
  // Orthonormal frame of the cell: x along a, y in the (a, b) plane. Rows of R are the new axes.
  const Mat3 L = s.cell.completed_lattice();
  const Vec3 ex = [&] { const double n = norm(L[0]); return Vec3{L[0][0] / n, L[0][1] / n, L[0][2] / n}; }();
  Vec3 ez = cross(L[0], L[1]);
  const double nz = norm(ez);
  ez = {ez[0] / nz, ez[1] / nz, ez[2] / nz};
  const Vec3 ey = cross(ez, ex);
  auto rotate = [&](const Vec3& v) { return Vec3{dot(ex, v), dot(ey, v), dot(ez, v)}; };
  const Vec3 a = rotate(L[0]), b = rotate(L[1]), c = rotate(L[2]);
  if (c[2] <= 0) throw Error(path + ": left-handed cell; LAMMPS needs a, b, c right-handed");

  std::vector<Vec3> x(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) x[i] = rotate(s.positions[i]);
  double lo[3] = {0, 0, 0}, hi[3] = {a[0], b[1], c[2]};
  double xy = b[0], xz = c[0], yz = c[1];
  for (int d = 0; d < 3; ++d) {
    if (s.cell.pbc[d]) continue;
    // Open direction: a box around the atoms (only meaningful for orthogonal open directions).
    lo[d] = 1e300;
    hi[d] = -1e300;
    for (const auto& p : x) {
      lo[d] = std::min(lo[d], p[d] - padding);
      hi[d] = std::max(hi[d], p[d] + padding);
    }
    if (d == 0) xy = xz = 0;
    if (d == 1) yz = 0;
  }
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp);
    if (!out) throw Error(tmp + ": cannot write");
    out << "LAMMPS data file written by mlip from " << (s.origin.empty() ? "a structure" : s.origin) << "\n\n";
    out << s.size() << " atoms\n" << type_elements.size() << " atom types\n\n";
    char line[256];
    for (int d = 0; d < 3; ++d) {
      std::snprintf(line, sizeof line, "%.17g %.17g %clo %chi\n", lo[d], hi[d], "xyz"[d], "xyz"[d]);
      out << line;
    }
    if (xy != 0 || xz != 0 || yz != 0) {
      std::snprintf(line, sizeof line, "%.17g %.17g %.17g xy xz yz\n", xy, xz, yz);
      out << line;
    }
    out << "\nMasses\n\n";
    for (std::size_t t = 0; t < type_elements.size(); ++t) {
      std::snprintf(line, sizeof line, "%zu %.7g  # %s\n", t + 1, atomic_mass(atomic_number(type_elements[t])),
                    type_elements[t].c_str());
      out << line;
    }
    out << "\nAtoms # atomic\n\n";
    for (std::size_t i = 0; i < s.size(); ++i) {
      const int t = type_of_z[s.numbers[i]];
      if (t == 0) {
        throw Error(path + ": " + s.origin + " has element " + element_symbol(s.numbers[i]) +
                    ", which is not among the atom types given");
      }
      std::snprintf(line, sizeof line, "%zu %d %.17g %.17g %.17g\n", i + 1, t, x[i][0], x[i][1], x[i][2]);
      out << line;
    }
    out.flush();
    if (!out) throw Error(tmp + ": error while writing");
  }
  std::filesystem::rename(tmp, path);
}

}  // namespace mlip
