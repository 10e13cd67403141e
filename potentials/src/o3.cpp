// O(3) building blocks in e3nn's conventions (mlip/o3.h): real spherical harmonics, Wigner 3j
// symbols computed as the invariant of three representations, and MACE's coupling basis.
#include "mlip/o3.h"

#include <cmath>
#include <map>
#include <mutex>
#include <tuple>

#include "mlip/error.h"

namespace mlip::o3 {
namespace {

const auto kF64 = torch::TensorOptions().dtype(torch::kFloat64);

double factorial(int n) {
  double f = 1;
  for (int i = 2; i <= n; ++i) f *= i;
  return f;
}

double binomial(int n, int k) { return factorial(n) / (factorial(k) * factorial(n - k)); }

// Y_l^m = norm(l, m) * sum_k coefficient(l, m, k) Z^(l - 2k - m) * (Re or Im)(X + iY)^|m|: the
// associated Legendre function without the Condon-Shortley phase, divided by sin^|m|.
double legendre_coefficient(int l, int m, int k) {
  return (k % 2 ? -1.0 : 1.0) * binomial(l, k) * binomial(2 * l - 2 * k, l) * factorial(l - 2 * k) /
         factorial(l - 2 * k - m) / std::pow(2.0, l);
}

double sh_norm(int l, int m) {
  return std::sqrt((2 * l + 1) * factorial(l - m) / factorial(l + m) * (m == 0 ? 1.0 : 2.0));
}

// The harmonics of degree l at unit vectors v (n, 3): (n, 2l + 1), e3nn's basis.
torch::Tensor sh_values(int l, const torch::Tensor& v) {
  const torch::Tensor X = v.select(1, 2), Y = v.select(1, 0), Z = v.select(1, 1);
  std::vector<torch::Tensor> re{torch::ones_like(X)}, im{torch::zeros_like(X)};
  for (int m = 1; m <= l; ++m) {
    re.push_back(re[m - 1] * X - im[m - 1] * Y);
    im.push_back(re[m - 1] * Y + im[m - 1] * X);
  }
  std::vector<torch::Tensor> cols;
  for (int m = -l; m <= l; ++m) {
    const int a = std::abs(m);
    torch::Tensor poly = torch::zeros_like(X);
    for (int k = 0; 2 * k <= l - a; ++k) poly = poly + legendre_coefficient(l, a, k) * Z.pow(l - 2 * k - a);
    cols.push_back(sh_norm(l, a) * poly * (m >= 0 ? re[a] : im[a]));
  }
  return torch::stack(cols, 1);
}

torch::Tensor rotation(double a, double b, double c) {
  auto rz = [](double t) {
    return torch::tensor({{std::cos(t), -std::sin(t), 0.0}, {std::sin(t), std::cos(t), 0.0}, {0.0, 0.0, 1.0}}, kF64);
  };
  const torch::Tensor ry =
      torch::tensor({{std::cos(b), 0.0, std::sin(b)}, {0.0, 1.0, 0.0}, {-std::sin(b), 0.0, std::cos(b)}}, kF64);
  return rz(a).matmul(ry).matmul(rz(c));
}

// The representation matrix D^l(R) in this basis: Y(R v) = D Y(v), fitted on sample points.
torch::Tensor wigner_d(int l, const torch::Tensor& R, const torch::Tensor& points) {
  const torch::Tensor y = sh_values(l, points), yr = sh_values(l, points.matmul(R.t()));
  return std::get<0>(torch::linalg_lstsq(y, yr, c10::nullopt, c10::nullopt)).t();
}

// The invariant of l1 <= l2 <= l3: the null vector of D1 x D2 x D3 - 1 for a few rotations.
torch::Tensor wigner_3j_sorted(int l1, int l2, int l3) {
  const int64_t n = int64_t(2 * l1 + 1) * (2 * l2 + 1) * (2 * l3 + 1);
  const torch::Tensor points =
      torch::nn::functional::normalize(torch::randn({64, 3}, at::detail::createCPUGenerator(7), kF64),
                                       torch::nn::functional::NormalizeFuncOptions().dim(1));
  torch::Tensor B = torch::zeros({n, n}, kF64);
  const double angles[3][3] = {{4.41301023, 5.56684102, 4.59384642},
                               {4.93325116, 6.12697327, 4.14574096},
                               {0.53878964, 4.09050444, 5.36539036}};
  for (const auto& a : angles) {
    const torch::Tensor R = rotation(a[0], a[1], a[2]);
    const torch::Tensor M = torch::einsum("il,jm,kn->ijklmn", {wigner_d(l1, R, points), wigner_d(l2, R, points),
                                                               wigner_d(l3, R, points)})
                                .reshape({n, n}) -
                            torch::eye(n, kF64);
    B += M.t().matmul(M);
  }
  auto [values, vectors] = torch::linalg_eigh(B, "L");
  if (values[0].item<double>() > 1e-10 || (n > 1 && values[1].item<double>() < 1e-6))
    throw Error("wigner_3j(" + std::to_string(l1) + ", " + std::to_string(l2) + ", " + std::to_string(l3) +
                "): no unique invariant (internal error)");
  torch::Tensor q = vectors.select(1, 0).clone();
  q.masked_fill_(q.abs() < 1e-14, 0.0);
  const torch::Tensor grid = q.reshape({2 * l1 + 1, 2 * l2 + 1, 2 * l3 + 1});
  double lead = grid[l1][l2][l3].item<double>();
  if (lead == 0.0) lead = q.index_select(0, torch::nonzero(q).select(1, 0).narrow(0, 0, 1)).item<double>();
  return lead < 0 ? -grid : grid;
}

}  // namespace

torch::Tensor coupling_basis_uncached(const std::vector<Irrep>& in, const Irrep& out, int nu);

std::vector<Irrep> product(const Irrep& a, const Irrep& b) {
  std::vector<Irrep> out;
  for (int l = std::abs(a.l - b.l); l <= a.l + b.l; ++l) out.push_back({l, a.p * b.p});
  return out;
}

torch::Tensor wigner_3j(int l1, int l2, int l3) {
  if (l1 < 0 || l2 < 0 || l3 < 0 || l3 < std::abs(l1 - l2) || l3 > l1 + l2)
    throw Error("wigner_3j: (" + std::to_string(l1) + ", " + std::to_string(l2) + ", " + std::to_string(l3) +
                ") violates the triangle inequality");
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int>, torch::Tensor> cache;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(l1, l2, l3);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  // Sort the axes, compute, and put them back; an odd permutation changes the sign by (-1)^sum.
  std::vector<std::pair<int, int>> ls{{l1, 0}, {l2, 1}, {l3, 2}};
  std::stable_sort(ls.begin(), ls.end());
  const int order[3] = {ls[0].second, ls[1].second, ls[2].second};  // sorted axis k is axis order[k]
  int inversions = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = i + 1; j < 3; ++j) inversions += order[i] > order[j];
  const torch::Tensor sorted = wigner_3j_sorted(ls[0].first, ls[1].first, ls[2].first);
  std::vector<int64_t> back(3);
  for (int k = 0; k < 3; ++k) back[order[k]] = k;
  torch::Tensor w = sorted.permute(back).contiguous();
  if (inversions % 2 == 1 && (l1 + l2 + l3) % 2 == 1) w = -w;
  cache[key] = w;
  return w;
}

std::pair<torch::Tensor, torch::Tensor> spherical_harmonics_terms(int lmax) {
  // Y_l^m as a polynomial of (X, Y, Z) = (v2, v0, v1): norm * sum_k coefficient Z^(l-2k-a) times the
  // real (m >= 0) or imaginary (m < 0) part of (X + iY)^a = sum_j binomial(a, j) X^(a-j) (iY)^j.
  std::vector<int64_t> terms;
  std::vector<double> coefficients;
  for (int l = 0; l <= lmax; ++l)
    for (int m = -l; m <= l; ++m) {
      const int a = std::abs(m);
      for (int k = 0; 2 * k <= l - a; ++k)
        for (int j = m >= 0 ? 0 : 1; j <= a; j += 2) {
          const double c = sh_norm(l, a) * legendre_coefficient(l, a, k) * binomial(a, j) * ((j / 2) % 2 ? -1.0 : 1.0);
          if (c == 0.0) continue;
          terms.insert(terms.end(), {l * l + m + l, j, l - 2 * k - a, a - j});  // powers of v0 (Y), v1 (Z), v2 (X)
          coefficients.push_back(c);
        }
    }
  const auto n = int64_t(coefficients.size());
  return {torch::tensor(terms, torch::kInt64).view({n, 4}), torch::tensor(coefficients, kF64)};
}

torch::Tensor spherical_harmonics(int lmax, const torch::Tensor& v) {
  std::vector<torch::Tensor> blocks;
  for (int l = 0; l <= lmax; ++l) blocks.push_back(sh_values(l, v));
  return torch::cat(blocks, 1);
}

torch::Tensor coupling_basis(const std::vector<Irrep>& in, const Irrep& out, int nu) {
  if (nu < 1) throw Error("coupling_basis: correlation must be >= 1");
  static std::mutex mutex;
  static std::map<std::string, torch::Tensor> cache;
  std::string key = std::to_string(nu) + ":" + out.str() + ":";
  for (const auto& ir : in) key += ir.str() + ",";
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (auto it = cache.find(key); it != cache.end()) return it->second;
  }
  torch::Tensor basis = coupling_basis_uncached(in, out, nu);
  std::lock_guard<std::mutex> lock(mutex);
  cache[key] = basis;
  return basis;
}

torch::Tensor coupling_basis_uncached(const std::vector<Irrep>& in, const Irrep& out, int nu) {
  int64_t D = 0;
  for (const auto& ir : in) D += ir.dim();
  // The successive products, as MACE enumerates them: (irrep, tensor (ir.dim, D, ..., D)).
  std::vector<std::pair<Irrep, torch::Tensor>> paths;
  {
    const torch::Tensor eye = torch::eye(D, kF64);
    int64_t i = 0;
    for (const auto& ir : in) paths.emplace_back(ir, eye.narrow(0, i, ir.dim())), i += ir.dim();
  }
  for (int k = 1; k < nu; ++k) {
    std::vector<std::pair<Irrep, torch::Tensor>> next;
    for (const auto& [left, c_left] : paths) {
      int64_t i = 0;
      for (const auto& ir : in) {
        for (const auto& o : product(left, ir)) {
          if (k == nu - 1 && o != out) continue;  // the last product keeps only `out` (same order)
          torch::Tensor C = wigner_3j(o.l, left.l, ir.l) * std::sqrt(double(o.dim()));
          C = torch::einsum("jk,ijl->ikl", {c_left.flatten(1), C});  // (o, D^k, ir)
          std::vector<int64_t> shape{o.dim()};
          for (int r = 0; r < k; ++r) shape.push_back(D);
          shape.push_back(D);
          torch::Tensor E = torch::zeros(shape, kF64);
          std::vector<int64_t> cshape(shape.begin(), shape.end() - 1);
          cshape.push_back(ir.dim());
          E.narrow(-1, i, ir.dim()).copy_(C.reshape(cshape));
          next.emplace_back(o, E);
        }
        i += ir.dim();
      }
    }
    std::stable_sort(next.begin(), next.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    paths = std::move(next);
  }
  std::vector<torch::Tensor> selected;
  for (const auto& [ir, t] : paths)
    if (ir == out) selected.push_back(t);
  if (selected.empty()) {
    std::vector<int64_t> shape{out.dim()};
    for (int r = 0; r < nu; ++r) shape.push_back(D);
    shape.push_back(1);
    return torch::zeros(shape, kF64);
  }
  return torch::stack(selected, -1);
}

}  // namespace mlip::o3
