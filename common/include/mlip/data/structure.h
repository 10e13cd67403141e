// An atomic structure with its DFT labels, in mlip's internal units: eV, Å, eV/Å, virial in eV.
//
// Sign conventions: forces are -dE/dx. The virial is W = -sum_ij r_ij (x) dE/dr_ij (eV), the
// convention of DeePMD and LAMMPS (W = -stress * volume with stress positive under tension), so a
// compressed solid has a positive virial trace.
#pragma once

#include <array>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

namespace mlip {

using Vec3 = std::array<double, 3>;
using Mat3 = std::array<Vec3, 3>;

/// A simulation cell: lattice vectors as rows (a, b, c) and periodicity per direction.
/// A non-periodic direction may have a zero lattice vector (gas phase).
struct Cell {
  Mat3 lattice{};                      // rows a, b, c in Å
  std::array<bool, 3> pbc{false, false, false};

  bool any_periodic() const { return pbc[0] || pbc[1] || pbc[2]; }
  double volume() const;               // |det(lattice)|

  /// The lattice with every non-periodic row that makes it singular replaced by a unit vector
  /// orthogonal to the periodic rows, so that fractional coordinates always exist.
  /// Throws mlip::Error if the periodic rows themselves are degenerate.
  Mat3 completed_lattice() const;
};

/// One frame: positions, elements and optional labels.
struct Structure {
  std::vector<Vec3> positions;         // (n_atoms) in Å, need not be wrapped into the cell
  std::vector<int> numbers;            // (n_atoms) atomic numbers
  Cell cell;

  std::optional<double> energy;        // eV
  std::vector<Vec3> forces;            // (n_atoms) eV/Å, or empty when not labelled
  std::optional<Mat3> virial;          // eV
  double weight = 1.0;                 // per-frame weight in the loss

  std::string origin;                  // "file:frame" or "file:line", for error messages

  std::size_t size() const { return positions.size(); }
  bool has_forces() const { return !forces.empty(); }

  /// Throws mlip::Error (naming `origin`) on inconsistent sizes, non-finite values, unknown
  /// elements, a singular periodic cell, or a non-positive weight.
  void validate() const;
};

/// A supercell: `s` repeated na x nb x nc times along its lattice vectors (labels dropped).
Structure replicate(const Structure& s, int na, int nb, int nc);

// Small 3x3 helpers shared by readers, neighbour lists and tests.
double det(const Mat3& m);
Mat3 inverse(const Mat3& m);            // throws mlip::Error if singular
inline Vec3 cross(const Vec3& a, const Vec3& b) {
  return {a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]};
}
inline double dot(const Vec3& a, const Vec3& b) { return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]; }
inline double norm(const Vec3& a) { return std::sqrt(dot(a, a)); }

}  // namespace mlip
