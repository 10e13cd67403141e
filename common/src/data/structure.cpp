#include "mlip/data/structure.h"

#include <cmath>
#include <vector>

#include "mlip/data/elements.h"
#include "mlip/error.h"

namespace mlip {

double det(const Mat3& m) { return dot(m[0], cross(m[1], m[2])); }

Mat3 inverse(const Mat3& m) {
  const double d = det(m);
  const double scale = norm(m[0]) * norm(m[1]) * norm(m[2]);
  if (!(std::abs(d) > 1e-12 * scale) || !std::isfinite(d)) {
    throw Error("singular cell (determinant " + std::to_string(d) + ")");
  }
  // Columns of the inverse are the reciprocal vectors divided by det.
  const Vec3 c0 = cross(m[1], m[2]), c1 = cross(m[2], m[0]), c2 = cross(m[0], m[1]);
  Mat3 inv{};
  for (int i = 0; i < 3; ++i) {
    inv[i][0] = c0[i] / d;
    inv[i][1] = c1[i] / d;
    inv[i][2] = c2[i] / d;
  }
  return inv;
}

double Cell::volume() const { return std::abs(det(lattice)); }

namespace {

bool nonsingular(const Mat3& m) {
  const double scale = norm(m[0]) * norm(m[1]) * norm(m[2]);
  const double d = det(m);
  return std::isfinite(d) && std::abs(d) > 1e-12 * scale && scale > 0.0;
}

Vec3 normalized(const Vec3& v) {
  const double n = norm(v);
  return {v[0] / n, v[1] / n, v[2] / n};
}

// A unit vector orthogonal to v (v nonzero).
Vec3 any_orthogonal(const Vec3& v) {
  const Vec3 trial = std::abs(v[0]) < 0.9 * norm(v) ? Vec3{1, 0, 0} : Vec3{0, 1, 0};
  return normalized(cross(v, trial));
}

}  // namespace

Mat3 Cell::completed_lattice() const {
  if (nonsingular(lattice)) return lattice;
  std::vector<int> periodic, open;
  for (int d = 0; d < 3; ++d) (pbc[d] ? periodic : open).push_back(d);
  Mat3 m = lattice;
  if (periodic.empty()) {
    m = {{{1, 0, 0}, {0, 1, 0}, {0, 0, 1}}};
  } else if (periodic.size() == 1) {
    const Vec3& a = lattice[periodic[0]];
    if (!(norm(a) > 0.0)) throw Error("periodic lattice vector " + std::to_string(periodic[0]) + " is zero");
    const Vec3 u = any_orthogonal(a);
    m[open[0]] = u;
    m[open[1]] = normalized(cross(a, u));
  } else if (periodic.size() == 2) {
    const Vec3 n = cross(lattice[periodic[0]], lattice[periodic[1]]);
    if (!(norm(n) > 0.0)) throw Error("periodic lattice vectors are parallel (singular cell)");
    m[open[0]] = normalized(n);
  }
  if (!nonsingular(m)) throw Error("singular cell (periodic lattice vectors are degenerate)");
  return m;
}

namespace {

bool finite(const Vec3& v) { return std::isfinite(v[0]) && std::isfinite(v[1]) && std::isfinite(v[2]); }

[[noreturn]] void fail(const std::string& origin, const std::string& what) {
  throw Error((origin.empty() ? std::string("structure") : origin) + ": " + what);
}

}  // namespace

Structure replicate(const Structure& s, int na, int nb, int nc) {
  if (na < 1 || nb < 1 || nc < 1) throw Error(s.origin + ": replication counts must be >= 1");
  Structure out;
  out.cell = s.cell;
  const int n[3] = {na, nb, nc};
  for (int d = 0; d < 3; ++d)
    for (double& x : out.cell.lattice[d]) x *= n[d];
  out.origin = s.origin + " x" + std::to_string(na) + "x" + std::to_string(nb) + "x" + std::to_string(nc);
  for (int a = 0; a < na; ++a)
    for (int b = 0; b < nb; ++b)
      for (int c = 0; c < nc; ++c)
        for (std::size_t i = 0; i < s.size(); ++i) {
          Vec3 x = s.positions[i];
          for (int d = 0; d < 3; ++d)
            x[d] += a * s.cell.lattice[0][d] + b * s.cell.lattice[1][d] + c * s.cell.lattice[2][d];
          out.positions.push_back(x);
          out.numbers.push_back(s.numbers[i]);
        }
  return out;
}

void Structure::validate() const {
  const std::size_t n = positions.size();
  if (n == 0) fail(origin, "no atoms");
  if (numbers.size() != n) {
    fail(origin, std::to_string(numbers.size()) + " species for " + std::to_string(n) + " atoms");
  }
  if (!forces.empty() && forces.size() != n) {
    fail(origin, std::to_string(forces.size()) + " forces for " + std::to_string(n) + " atoms");
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (numbers[i] < 1 || numbers[i] > kMaxAtomicNumber) {
      fail(origin, "atom " + std::to_string(i) + " has unknown element (atomic number " +
                       std::to_string(numbers[i]) + ")");
    }
    if (!finite(positions[i])) fail(origin, "atom " + std::to_string(i) + " has a non-finite position");
    if (!forces.empty() && !finite(forces[i])) {
      fail(origin, "atom " + std::to_string(i) + " has a non-finite force");
    }
  }
  for (const Vec3& row : cell.lattice) {
    if (!finite(row)) fail(origin, "non-finite cell");
  }
  if (cell.any_periodic()) {
    try {
      cell.completed_lattice();
    } catch (const Error& e) {
      fail(origin, e.what());
    }
  }
  if (energy && !std::isfinite(*energy)) fail(origin, "non-finite energy");
  if (virial) {
    for (const Vec3& row : *virial) {
      if (!finite(row)) fail(origin, "non-finite virial");
    }
  }
  if (!(weight > 0.0) || !std::isfinite(weight)) fail(origin, "frame weight must be positive");
}

}  // namespace mlip
