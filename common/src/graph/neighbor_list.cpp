#include "mlip/graph/neighbor_list.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "mlip/error.h"

namespace mlip {
namespace {

// Fractional coordinates s = x . inv(L) for a row-vector lattice L.
Vec3 to_fractional(const Vec3& x, const Mat3& inv) {
  Vec3 s{};
  for (int d = 0; d < 3; ++d) s[d] = x[0] * inv[0][d] + x[1] * inv[1][d] + x[2] * inv[2][d];
  return s;
}

Vec3 edge_vector(const Structure& s, int64_t i, int64_t j, const std::array<int32_t, 3>& shift) {
  Vec3 r{};
  const Mat3& L = s.cell.lattice;
  for (int d = 0; d < 3; ++d) {
    r[d] = s.positions[j][d] - s.positions[i][d] + shift[0] * L[0][d] + shift[1] * L[1][d] +
           shift[2] * L[2][d];
  }
  return r;
}

// Distance between the lattice planes spanned by the two other rows: how far apart the faces
// of the cell are along direction d.
std::array<double, 3> plane_widths(const Mat3& L) {
  const double vol = std::abs(det(L));
  return {vol / norm(cross(L[1], L[2])), vol / norm(cross(L[2], L[0])), vol / norm(cross(L[0], L[1]))};
}

void check_inputs(const Structure& s, double cutoff) {
  if (!(cutoff > 0.0) || !std::isfinite(cutoff)) {
    throw Error(s.origin + ": neighbour-list cutoff must be positive, got " + std::to_string(cutoff));
  }
}

void sort_edges(NeighborList& nl) {
  std::vector<std::size_t> order(nl.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    if (nl.centers[a] != nl.centers[b]) return nl.centers[a] < nl.centers[b];
    if (nl.neighbors[a] != nl.neighbors[b]) return nl.neighbors[a] < nl.neighbors[b];
    return nl.shifts[a] < nl.shifts[b];
  });
  NeighborList out;
  out.centers.reserve(order.size());
  out.neighbors.reserve(order.size());
  out.shifts.reserve(order.size());
  out.vectors.reserve(order.size());
  for (std::size_t e : order) {
    out.centers.push_back(nl.centers[e]);
    out.neighbors.push_back(nl.neighbors[e]);
    out.shifts.push_back(nl.shifts[e]);
    out.vectors.push_back(nl.vectors[e]);
  }
  nl = std::move(out);
}

void check_overlaps(const Structure& s, const NeighborList& nl, double min_distance) {
  if (min_distance <= 0.0) return;
  for (std::size_t e = 0; e < nl.size(); ++e) {
    const double r = norm(nl.vectors[e]);
    if (r < min_distance) {
      throw Error(s.origin + ": atoms " + std::to_string(nl.centers[e]) + " and " +
                  std::to_string(nl.neighbors[e]) + " overlap (distance " + std::to_string(r) +
                  " Å < " + std::to_string(min_distance) + " Å)");
    }
  }
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

}  // namespace

NeighborList build_neighbor_list(const Structure& s, double cutoff, const NeighborOptions& opts) {
  check_inputs(s, cutoff);
  const int64_t n = static_cast<int64_t>(s.size());
  NeighborList nl;
  if (n == 0) return nl;

  Mat3 L;
  try {
    L = s.cell.completed_lattice();
  } catch (const Error& e) {
    throw Error(s.origin + ": " + e.what());
  }
  const Mat3 inv = inverse(L);
  const std::array<double, 3> width = plane_widths(L);
  const auto& pbc = s.cell.pbc;

  // Wrap periodic fractional coordinates into [0, 1) and remember the image each atom came from.
  std::vector<Vec3> frac(n);
  std::vector<std::array<int32_t, 3>> image(n, {0, 0, 0});
  Vec3 lo{0, 0, 0}, hi{1, 1, 1};
  for (int d = 0; d < 3; ++d) {
    if (!pbc[d]) lo[d] = hi[d] = to_fractional(s.positions[0], inv)[d];
  }
  for (int64_t i = 0; i < n; ++i) {
    frac[i] = to_fractional(s.positions[i], inv);
    for (int d = 0; d < 3; ++d) {
      if (pbc[d]) {
        const double f = std::floor(frac[i][d]);
        image[i][d] = static_cast<int32_t>(f);
        frac[i][d] -= f;
      } else {
        lo[d] = std::min(lo[d], frac[i][d]);
        hi[d] = std::max(hi[d], frac[i][d]);
      }
    }
  }

  // Bins at least `cutoff` thick along each direction, fewer when the system is dilute so that
  // the number of bins stays O(N).
  std::array<int64_t, 3> nbins{};
  const double reach[3] = {cutoff / width[0], cutoff / width[1], cutoff / width[2]};  // fractional
  for (int d = 0; d < 3; ++d) {
    const double extent = std::max(hi[d] - lo[d], 1e-12);
    nbins[d] = std::max<int64_t>(1, static_cast<int64_t>(std::min(extent / reach[d], 1e6)));
  }
  const int64_t budget = std::max<int64_t>(64, 2 * n);
  while (nbins[0] * nbins[1] * nbins[2] > budget) {
    const int d = static_cast<int>(std::max_element(nbins.begin(), nbins.end()) - nbins.begin());
    nbins[d] = (nbins[d] + 1) / 2;
  }
  std::array<double, 3> bin_size{};
  std::array<int64_t, 3> span{};
  for (int d = 0; d < 3; ++d) {
    bin_size[d] = std::max(hi[d] - lo[d], 1e-12) / static_cast<double>(nbins[d]);
    span[d] = static_cast<int64_t>(std::ceil(reach[d] / bin_size[d]));
    if (!pbc[d]) span[d] = std::min(span[d], nbins[d] - 1);
  }

  // Counting sort of atoms into bins (CSR layout).
  const int64_t total_bins = nbins[0] * nbins[1] * nbins[2];
  std::vector<std::array<int64_t, 3>> bin_of(n);
  std::vector<int64_t> bin_start(total_bins + 1, 0), atoms_in_bin(n);
  auto linear = [&](const std::array<int64_t, 3>& b) { return (b[0] * nbins[1] + b[1]) * nbins[2] + b[2]; };
  for (int64_t i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) {
      const auto b = static_cast<int64_t>(std::floor((frac[i][d] - lo[d]) / bin_size[d]));
      bin_of[i][d] = std::clamp<int64_t>(b, 0, nbins[d] - 1);
    }
    ++bin_start[linear(bin_of[i]) + 1];
  }
  std::partial_sum(bin_start.begin(), bin_start.end(), bin_start.begin());
  {
    std::vector<int64_t> fill(bin_start.begin(), bin_start.end() - 1);
    for (int64_t i = 0; i < n; ++i) atoms_in_bin[fill[linear(bin_of[i])]++] = i;
  }

  // Wrapped Cartesian positions: distances are tested on these, edge vectors are then recomputed
  // from the positions as given.
  std::vector<Vec3> wrapped(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) {
      wrapped[i][d] = frac[i][0] * L[0][d] + frac[i][1] * L[1][d] + frac[i][2] * L[2][d];
    }
  }

  const double rc2 = cutoff * cutoff;
  const std::size_t reserve_hint = static_cast<std::size_t>(n) * 32;
  nl.centers.reserve(reserve_hint);
  nl.neighbors.reserve(reserve_hint);
  nl.shifts.reserve(reserve_hint);
  nl.vectors.reserve(reserve_hint);
  for (int64_t i = 0; i < n; ++i) {
    const auto& bi = bin_of[i];
    for (int64_t ox = -span[0]; ox <= span[0]; ++ox) {
      for (int64_t oy = -span[1]; oy <= span[1]; ++oy) {
        for (int64_t oz = -span[2]; oz <= span[2]; ++oz) {
          const int64_t off[3] = {ox, oy, oz};
          std::array<int64_t, 3> tb{};
          std::array<int32_t, 3> img{0, 0, 0};
          bool inside = true;
          for (int d = 0; d < 3; ++d) {
            const int64_t t = bi[d] + off[d];
            if (pbc[d]) {
              const int64_t q = floor_div(t, nbins[d]);
              img[d] = static_cast<int32_t>(q);
              tb[d] = t - q * nbins[d];
            } else {
              inside = inside && t >= 0 && t < nbins[d];
              tb[d] = t;
            }
          }
          if (!inside) continue;
          const Vec3 offset = {img[0] * L[0][0] + img[1] * L[1][0] + img[2] * L[2][0],
                               img[0] * L[0][1] + img[1] * L[1][1] + img[2] * L[2][1],
                               img[0] * L[0][2] + img[1] * L[1][2] + img[2] * L[2][2]};
          const int64_t b = linear(tb);
          for (int64_t k = bin_start[b]; k < bin_start[b + 1]; ++k) {
            const int64_t j = atoms_in_bin[k];
            if (j == i && img[0] == 0 && img[1] == 0 && img[2] == 0) continue;
            // Screen on wrapped positions, then decide on the edge vector as reported (from
            // the positions as given), so that |r| < cutoff holds exactly for every edge.
            const double dx = wrapped[j][0] + offset[0] - wrapped[i][0];
            const double dy = wrapped[j][1] + offset[1] - wrapped[i][1];
            const double dz = wrapped[j][2] + offset[2] - wrapped[i][2];
            if (dx * dx + dy * dy + dz * dz >= rc2 * (1.0 + 1e-9)) continue;
            const std::array<int32_t, 3> shift = {img[0] + image[i][0] - image[j][0],
                                                  img[1] + image[i][1] - image[j][1],
                                                  img[2] + image[i][2] - image[j][2]};
            const Vec3 r = edge_vector(s, i, j, shift);
            if (dot(r, r) >= rc2) continue;
            nl.centers.push_back(i);
            nl.neighbors.push_back(j);
            nl.shifts.push_back(shift);
            nl.vectors.push_back(r);
          }
        }
      }
    }
  }
  if (opts.sort) sort_edges(nl);
  check_overlaps(s, nl, opts.min_distance);
  return nl;
}

NeighborList build_neighbor_list_brute_force(const Structure& s, double cutoff) {
  check_inputs(s, cutoff);
  const int64_t n = static_cast<int64_t>(s.size());
  NeighborList nl;
  if (n == 0) return nl;
  const Mat3 L = s.cell.completed_lattice();
  const Mat3 inv = inverse(L);
  const std::array<double, 3> width = plane_widths(L);
  std::vector<Vec3> frac(n);
  for (int64_t i = 0; i < n; ++i) frac[i] = to_fractional(s.positions[i], inv);
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      // Every shift that can bring j within the cutoff of i, direction by direction.
      int lo[3], hi[3];
      for (int d = 0; d < 3; ++d) {
        if (s.cell.pbc[d]) {
          const double delta = frac[i][d] - frac[j][d], reach = cutoff / width[d];
          lo[d] = static_cast<int>(std::floor(delta - reach)) - 1;
          hi[d] = static_cast<int>(std::ceil(delta + reach)) + 1;
        } else {
          lo[d] = hi[d] = 0;
        }
      }
      for (int a = lo[0]; a <= hi[0]; ++a) {
        for (int b = lo[1]; b <= hi[1]; ++b) {
          for (int c = lo[2]; c <= hi[2]; ++c) {
            if (i == j && a == 0 && b == 0 && c == 0) continue;
            const std::array<int32_t, 3> shift = {a, b, c};
            const Vec3 r = edge_vector(s, i, j, shift);
            if (dot(r, r) >= cutoff * cutoff) continue;
            nl.centers.push_back(i);
            nl.neighbors.push_back(j);
            nl.shifts.push_back(shift);
            nl.vectors.push_back(r);
          }
        }
      }
    }
  }
  sort_edges(nl);
  return nl;
}

}  // namespace mlip
