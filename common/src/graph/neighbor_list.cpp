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
  out.vectors.reserve(nl.vectors.size());
  for (std::size_t e : order) {
    out.centers.push_back(nl.centers[e]);
    out.neighbors.push_back(nl.neighbors[e]);
    out.shifts.push_back(nl.shifts[e]);
    if (!nl.vectors.empty()) out.vectors.push_back(nl.vectors[e]);
  }
  nl = std::move(out);
}

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }

int64_t largest_bin(const std::vector<int64_t>& bin_start) {
  int64_t m = 0;
  for (std::size_t b = 0; b + 1 < bin_start.size(); ++b) m = std::max(m, bin_start[b + 1] - bin_start[b]);
  return m;
}

// Edges to reserve room for: the atoms' mean density times the cutoff sphere, plus a tenth, at
// most 200 a atom (a denser list grows as it goes).
std::size_t expected_edges(int64_t n, double cutoff, const Mat3& L, const std::array<bool, 3>& pbc, const Vec3& lo,
                           const Vec3& hi) {
  double volume = std::abs(det(L));
  for (int d = 0; d < 3; ++d)
    if (!pbc[d]) volume *= std::max(hi[d] - lo[d], 1e-3);
  const double sphere = 4.0 / 3.0 * 3.141592653589793 * cutoff * cutoff * cutoff;
  const double per_atom = std::min(1.1 * static_cast<double>(n) * sphere / std::max(volume, 1e-30), 200.0);
  return static_cast<std::size_t>(static_cast<double>(n) * per_atom) + 16;
}

// x rounded to the nearest integer (halves away from zero), for |x| < 2^31, in a form compilers
// vectorise and fast-math options leave alone.
inline double round_nearest(double x) { return static_cast<double>(static_cast<int32_t>(x + std::copysign(0.5, x))); }

// Fractional coordinates of the atoms, periodic ones wrapped into [0, 1), the cell each atom came
// from (`image`), and the atoms' extent along the non-periodic directions ([0, 1) along the
// periodic ones).
struct Wrapped {
  std::vector<Vec3> frac;
  std::vector<std::array<int32_t, 3>> image;
  Vec3 lo{0, 0, 0}, hi{1, 1, 1};
};

Wrapped wrap(const Structure& s, const Mat3& inv) {
  const int64_t n = static_cast<int64_t>(s.size());
  const auto& pbc = s.cell.pbc;
  Wrapped w;
  w.frac.resize(n);
  w.image.assign(n, {0, 0, 0});
  for (int d = 0; d < 3; ++d) {
    if (!pbc[d]) w.lo[d] = w.hi[d] = to_fractional(s.positions[0], inv)[d];
  }
  for (int64_t i = 0; i < n; ++i) {
    Vec3& f = w.frac[i];
    f = to_fractional(s.positions[i], inv);
    for (int d = 0; d < 3; ++d) {
      if (pbc[d]) {
        const double c = std::floor(f[d]);
        w.image[i][d] = static_cast<int32_t>(c);
        f[d] -= c;
      } else {
        w.lo[d] = std::min(w.lo[d], f[d]);
        w.hi[d] = std::max(w.hi[d], f[d]);
      }
    }
  }
  return w;
}

// Edges as build_neighbor_list reports them: decided on the edge vector from the positions as
// given (the searches screen on wrapped ones), so that |r| < cutoff holds exactly for every edge;
// atoms closer than the options' min_distance are an error naming the first such pair in
// (centre, neighbour) order.
class EdgeSink {
 public:
  EdgeSink(const Structure& s, const Wrapped& w, double cutoff, const NeighborOptions& opts, NeighborList& nl)
      : s_(s), w_(w), rc2_(cutoff * cutoff), keep_vectors_(opts.vectors), min_distance_(opts.min_distance),
        overlap2_(opts.min_distance > 0.0 ? opts.min_distance * opts.min_distance : 0.0), nl_(nl) {}

  // An edge kept: its shift and vector.
  struct Edge {
    std::array<int32_t, 3> shift;
    Vec3 r;
  };

  // Atom j seen from atom i in the periodic image `img` of the wrapped cell, if within the cutoff.
  bool accept(int64_t i, int64_t j, const std::array<int32_t, 3>& img, Edge& e) {
    e.shift = {img[0] + w_.image[i][0] - w_.image[j][0], img[1] + w_.image[i][1] - w_.image[j][1],
               img[2] + w_.image[i][2] - w_.image[j][2]};
    e.r = edge_vector(s_, i, j, e.shift);
    const double r2 = dot(e.r, e.r);
    if (r2 >= rc2_) return false;
    if (r2 < overlap2_ && (overlapping_ < 0 || j < overlapping_)) {
      overlapping_ = j;
      overlap_r_ = std::sqrt(r2);
    }
    return true;
  }

  void add(int64_t i, int64_t j, const std::array<int32_t, 3>& img) {
    Edge e;
    if (accept(i, j, img, e)) push(i, j, e);
  }

  // A pair i < j accepted, with the shift of the edge from i to j.
  struct Pair {
    int64_t i, j;
    std::array<int32_t, 3> shift;
  };

  // Pairs accepted in (i, j) order, reported in both directions in (centre, neighbour) order:
  // centre c's neighbours below c come from the pairs (j, c), met in order of j, before its own
  // pairs (c, j). The reverse edge's vector is the exact negation (edge_vector is sign-symmetric),
  // so both directions are decided alike.
  void add_pairs(const std::vector<Pair>& pairs, int64_t n) {
    std::vector<std::size_t> next(n + 1, 0);
    for (const Pair& p : pairs) ++next[p.i + 1], ++next[p.j + 1];
    std::partial_sum(next.begin(), next.end(), next.begin());
    const std::size_t start = nl_.size(), total = start + 2 * pairs.size();
    nl_.centers.resize(total);
    nl_.neighbors.resize(total);
    nl_.shifts.resize(total);
    if (keep_vectors_) nl_.vectors.resize(total);
    for (const Pair& p : pairs) {
      const std::size_t k = start + next[p.i]++, l = start + next[p.j]++;
      nl_.centers[k] = nl_.neighbors[l] = p.i;
      nl_.neighbors[k] = nl_.centers[l] = p.j;
      nl_.shifts[k] = p.shift;
      nl_.shifts[l] = {-p.shift[0], -p.shift[1], -p.shift[2]};
      if (keep_vectors_) {
        const Vec3 r = edge_vector(s_, p.i, p.j, p.shift);
        nl_.vectors[k] = r;
        nl_.vectors[l] = {-r[0], -r[1], -r[2]};
      }
    }
  }

  // After every neighbour of centre i was added (or, for pairs, every j > i).
  void end_centre(int64_t i) {
    if (overlapping_ < 0) return;
    throw Error(s_.origin + ": atoms " + std::to_string(i) + " and " + std::to_string(overlapping_) + " overlap (distance " +
                std::to_string(overlap_r_) + " Å < " + std::to_string(min_distance_) + " Å)");
  }

 private:
  const Structure& s_;
  const Wrapped& w_;
  double rc2_;
  bool keep_vectors_;
  double min_distance_, overlap2_;
  NeighborList& nl_;
  int64_t overlapping_ = -1;  // the lowest neighbour of the current centre closer than min_distance
  double overlap_r_ = 0.0;

  void push(int64_t i, int64_t j, const Edge& e) {
    nl_.centers.push_back(i);
    nl_.neighbors.push_back(j);
    nl_.shifts.push_back(e.shift);
    if (keep_vectors_) nl_.vectors.push_back(e.r);
  }
};

// Cell binning: bins at least `cutoff` thick along each direction (fewer when the system is
// dilute, so that the number of bins stays O(N)), and how many bins away a neighbour can be.
struct Grid {
  std::array<int64_t, 3> nbins{}, span{};
  std::array<double, 3> bin_size{};
  int64_t total() const { return nbins[0] * nbins[1] * nbins[2]; }
  int64_t linear(const std::array<int64_t, 3>& b) const { return (b[0] * nbins[1] + b[1]) * nbins[2] + b[2]; }
};

Grid make_grid(const Wrapped& w, const std::array<bool, 3>& pbc, const std::array<double, 3>& reach, int64_t n) {
  Grid g;
  for (int d = 0; d < 3; ++d) {
    const double extent = std::max(w.hi[d] - w.lo[d], 1e-12);
    g.nbins[d] = std::max<int64_t>(1, static_cast<int64_t>(std::min(extent / reach[d], 1e6)));
  }
  const int64_t budget = std::max<int64_t>(64, 2 * n);
  while (g.total() > budget) {
    const int d = static_cast<int>(std::max_element(g.nbins.begin(), g.nbins.end()) - g.nbins.begin());
    g.nbins[d] = (g.nbins[d] + 1) / 2;
  }
  for (int d = 0; d < 3; ++d) {
    g.bin_size[d] = std::max(w.hi[d] - w.lo[d], 1e-12) / static_cast<double>(g.nbins[d]);
    g.span[d] = static_cast<int64_t>(std::ceil(reach[d] / g.bin_size[d]));
    if (!pbc[d]) g.span[d] = std::min(g.span[d], g.nbins[d] - 1);
  }
  return g;
}

// Pairs the binned search screens: each atom against the atoms of (2 span + 1)^3 bins.
double binned_candidates(const Grid& g, int64_t n) {
  const double stencil = static_cast<double>((2 * g.span[0] + 1) * (2 * g.span[1] + 1) * (2 * g.span[2] + 1));
  return static_cast<double>(n) * stencil * static_cast<double>(n) / static_cast<double>(g.total());
}

// Every atom against the atoms of the bins within reach (O(N)).
void search_binned(const Wrapped& w, const Mat3& L, const Grid& g, const std::array<bool, 3>& pbc, double screen,
                   EdgeSink& sink) {
  const int64_t n = static_cast<int64_t>(w.frac.size());
  // Counting sort of atoms into bins (CSR layout).
  std::vector<std::array<int64_t, 3>> bin_of(n);
  std::vector<int64_t> bin_start(g.total() + 1, 0), atoms_in_bin(n);
  for (int64_t i = 0; i < n; ++i) {
    for (int d = 0; d < 3; ++d) {
      const auto b = static_cast<int64_t>(std::floor((w.frac[i][d] - w.lo[d]) / g.bin_size[d]));
      bin_of[i][d] = std::clamp<int64_t>(b, 0, g.nbins[d] - 1);
    }
    ++bin_start[g.linear(bin_of[i]) + 1];
  }
  std::partial_sum(bin_start.begin(), bin_start.end(), bin_start.begin());
  {
    std::vector<int64_t> fill(bin_start.begin(), bin_start.end() - 1);
    for (int64_t i = 0; i < n; ++i) atoms_in_bin[fill[g.linear(bin_of[i])]++] = i;
  }
  // Wrapped Cartesian positions in bin order, one array per axis: a bin is a contiguous run.
  std::array<std::vector<double>, 3> binned;
  for (auto& x : binned) x.resize(n);
  for (int64_t k = 0; k < n; ++k) {
    const Vec3& f = w.frac[atoms_in_bin[k]];
    for (int d = 0; d < 3; ++d) binned[d][k] = f[0] * L[0][d] + f[1] * L[1][d] + f[2] * L[2][d];
  }
  std::vector<double> d2(static_cast<std::size_t>(largest_bin(bin_start)));

  for (int64_t i = 0; i < n; ++i) {
    const auto& bi = bin_of[i];
    const Vec3& fi = w.frac[i];
    for (int64_t ox = -g.span[0]; ox <= g.span[0]; ++ox) {
      for (int64_t oy = -g.span[1]; oy <= g.span[1]; ++oy) {
        for (int64_t oz = -g.span[2]; oz <= g.span[2]; ++oz) {
          const int64_t off[3] = {ox, oy, oz};
          std::array<int64_t, 3> tb{};
          std::array<int32_t, 3> img{0, 0, 0};
          bool inside = true;
          for (int d = 0; d < 3; ++d) {
            const int64_t t = bi[d] + off[d];
            if (pbc[d]) {
              const int64_t q = floor_div(t, g.nbins[d]);
              img[d] = static_cast<int32_t>(q);
              tb[d] = t - q * g.nbins[d];
            } else {
              inside = inside && t >= 0 && t < g.nbins[d];
              tb[d] = t;
            }
          }
          if (!inside) continue;
          // Atom i seen from the image `img` of the target bin: x_j + img . L - x_i = x_j - origin.
          double origin[3];
          for (int d = 0; d < 3; ++d) {
            origin[d] = (fi[0] - img[0]) * L[0][d] + (fi[1] - img[1]) * L[1][d] + (fi[2] - img[2]) * L[2][d];
          }
          const int64_t b = g.linear(tb), first = bin_start[b], count = bin_start[b + 1] - first;
          const double *bx = binned[0].data() + first, *by = binned[1].data() + first, *bz = binned[2].data() + first;
          for (int64_t k = 0; k < count; ++k) {  // vectorised: the screen of the whole bin
            const double dx = bx[k] - origin[0], dy = by[k] - origin[1], dz = bz[k] - origin[2];
            d2[k] = dx * dx + dy * dy + dz * dz;
          }
          const bool home = img[0] == 0 && img[1] == 0 && img[2] == 0;
          for (int64_t k = 0; k < count; ++k) {
            const int64_t j = atoms_in_bin[first + k];
            if (d2[k] < screen && !(j == i && home)) sink.add(i, j, img);
          }
        }
      }
    }
    sink.end_centre(i);
  }
}

// Every pair at its nearest image: for cells where the cutoff is below half of every periodic
// width, so that no other image of an atom is within it. Small cells (the frames of most training
// sets) screen fewer pairs so than binned. Each pair is screened and decided once, as (i, j > i),
// and reported in both directions, sorted. The first overlap in (centre, neighbour) order is the
// pair lowest in (i, j), so the error is the same as from a search of every direction.
void search_all_pairs(const Wrapped& w, const Mat3& L, const std::array<bool, 3>& pbc, double screen, EdgeSink& sink) {
  const int64_t n = static_cast<int64_t>(w.frac.size());
  std::array<std::vector<double>, 3> f;
  for (int d = 0; d < 3; ++d) {
    f[d].resize(n);
    for (int64_t i = 0; i < n; ++i) f[d][i] = w.frac[i][d];
  }
  const double periodic[3] = {pbc[0] ? 1.0 : 0.0, pbc[1] ? 1.0 : 0.0, pbc[2] ? 1.0 : 0.0};
  std::vector<double> d2(n);
  std::vector<EdgeSink::Pair> pairs;
  pairs.reserve(static_cast<std::size_t>(n) * 8);
  const double *fx = f[0].data(), *fy = f[1].data(), *fz = f[2].data();
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) {  // vectorised: the screen of every pair (i, j > i)
      double s[3] = {fx[j] - fx[i], fy[j] - fy[i], fz[j] - fz[i]};
      for (int d = 0; d < 3; ++d) s[d] -= periodic[d] * round_nearest(periodic[d] * s[d]);  // |s| < 1 where periodic
      const double dx = s[0] * L[0][0] + s[1] * L[1][0] + s[2] * L[2][0];
      const double dy = s[0] * L[0][1] + s[1] * L[1][1] + s[2] * L[2][1];
      const double dz = s[0] * L[0][2] + s[1] * L[1][2] + s[2] * L[2][2];
      d2[j] = dx * dx + dy * dy + dz * dz;
    }
    for (int64_t j = i + 1; j < n; ++j) {
      if (d2[j] >= screen) continue;
      std::array<int32_t, 3> img{0, 0, 0};
      for (int d = 0; d < 3; ++d) {
        if (pbc[d]) img[d] = -static_cast<int32_t>(round_nearest(f[d][j] - f[d][i]));
      }
      EdgeSink::Edge e;
      if (sink.accept(i, j, img, e)) pairs.push_back({i, j, e.shift});
    }
    sink.end_centre(i);
  }
  sink.add_pairs(pairs, n);
}

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
  const std::array<double, 3> width = plane_widths(L);
  const auto& pbc = s.cell.pbc;
  const Wrapped w = wrap(s, inverse(L));
  const std::array<double, 3> reach = {cutoff / width[0], cutoff / width[1], cutoff / width[2]};  // fractional
  const Grid grid = make_grid(w, pbc, reach, n);

  const std::size_t reserve_hint = expected_edges(n, cutoff, L, pbc, w.lo, w.hi);
  nl.centers.reserve(reserve_hint);
  nl.neighbors.reserve(reserve_hint);
  nl.shifts.reserve(reserve_hint);
  if (opts.vectors) nl.vectors.reserve(reserve_hint);
  EdgeSink sink(s, w, cutoff, opts, nl);
  const double screen = cutoff * cutoff * (1.0 + 1e-9);
  bool one_image = true;  // no periodic width within twice the cutoff
  for (int d = 0; d < 3; ++d) one_image = one_image && (!pbc[d] || 2.0 * cutoff * (1.0 + 1e-9) < width[d]);
  if (one_image && static_cast<double>(n) * static_cast<double>(n) <= binned_candidates(grid, n)) {
    search_all_pairs(w, L, pbc, screen, sink);
    return nl;  // sorted already
  }
  search_binned(w, L, grid, pbc, screen, sink);
  if (opts.sort) sort_edges(nl);
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
