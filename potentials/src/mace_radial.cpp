#include "mace_radial.h"

#include <cmath>
#include <sstream>

#include "mlip/data/elements.h"
#include "mlip/o3.h"

namespace mlip::detail {
namespace {

constexpr double kPi = 3.141592653589793;

// e3nn's normalize2mom constants (1 / sqrt(<f(z)^2>) over its 10^6 float64 normal samples, seed 0)
// of the gates mace-torch offers; SiLU's is o3::kSiluNorm.
constexpr double kTanhNorm = 1.5937334472592695;
constexpr double kAbsNorm = 1.001110600838467;

// 1 - (p+1)(p+2)/2 u^p + p(p+2) u^(p+1) - p(p+1)/2 u^(p+2): mace-torch's PolynomialCutoff of u = r / r_max.
std::string envelope(const std::string& u, int p) {
  const double pp = p;
  std::ostringstream s;
  s << "(1.0 - " << num((pp + 1) * (pp + 2) / 2) << " * torch.pow(" << u << ", " << p << ") + " << num(pp * (pp + 2))
    << " * torch.pow(" << u << ", " << p + 1 << ") - " << num(pp * (pp + 1) / 2) << " * torch.pow(" << u << ", "
    << p + 2 << "))";
  return s.str();
}

// sqrt(2 / r_max) sin(k r) / r, times the envelope of order p (0: without), as one operator
// (mlip/ops/bessel_radial.h) with the frequencies self.bessel_w.
std::string bessel(const MaceRadial& m, double cutoff, const std::string& r, int p) {
  return "mlip_ops.bessel_radial(" + r + ", self.bessel_w, " + num(cutoff) + ", " + std::to_string(p) + ", " +
         (m.harmonic() ? "True" : "False") + ", 0)";
}

// A species-pair table of covalent-radius sums, times `factor`.
torch::Tensor pair_radii(const std::vector<std::string>& species, double factor) {
  const int64_t n = int64_t(species.size());
  torch::Tensor t = torch::zeros({n, n}, torch::kFloat64);
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = 0; b < n; ++b)
      t[a][b] = factor * (covalent_radius(atomic_number(species[a])) + covalent_radius(atomic_number(species[b])));
  return t;
}

}  // namespace

MaceRadial read_mace_radial(HyperParameters& hp, int num_radial_basis, int num_cutoff_basis) {
  MaceRadial m;
  m.p = num_cutoff_basis;
  m.nb = num_radial_basis;
  m.gate = hp.get<std::string>("gate", "silu");
  if (m.gate != "silu" && m.gate != "tanh" && m.gate != "abs" && m.gate != "None")
    hp.fail("gate", "must be silu, tanh, abs or None (mace-torch's choices), not '" + m.gate + "'");
  m.bessel = hp.get<std::vector<double>>("bessel_weights", {});
  if (!m.bessel.empty() && int(m.bessel.size()) != num_radial_basis)
    hp.fail("bessel_weights", "must have num_radial_basis (" + std::to_string(num_radial_basis) + ") values, not " +
                                  std::to_string(m.bessel.size()));
  const auto transform = hp.get<std::string>("distance_transform", "None");
  if (transform != "None" && transform != "Agnesi")
    hp.fail("distance_transform", "must be None or Agnesi, not '" + transform + "'");
  m.agnesi = transform == "Agnesi";
  if (m.agnesi) {
    const auto a = hp.get<nlohmann::json>("agnesi", nlohmann::json::object());
    m.agnesi_q = a.value("q", m.agnesi_q), m.agnesi_p = a.value("p", m.agnesi_p), m.agnesi_a = a.value("a", m.agnesi_a);
  }
  m.apply_cutoff = hp.get<bool>("apply_cutoff", true);
  m.zbl = hp.get<bool>("pair_repulsion", false);
  if (m.zbl) {
    const auto z = hp.get<nlohmann::json>("zbl", nlohmann::json::object());
    m.zbl_a_exp = z.value("a_exp", m.zbl_a_exp), m.zbl_a_prefactor = z.value("a_prefactor", m.zbl_a_prefactor);
  }
  return m;
}

std::vector<double> MaceRadial::frequencies(double cutoff) const {
  if (!bessel.empty()) return bessel;
  std::vector<double> k;
  for (int n = 1; n <= nb; ++n) k.push_back(n * kPi / cutoff);
  return k;
}

bool MaceRadial::harmonic() const {
  for (std::size_t n = 1; n < bessel.size(); ++n)
    if (std::abs(bessel[n] - double(n + 1) * bessel[0]) > 1e-13 * std::abs(bessel[n])) return false;
  return true;
}

void mace_radial_buffers(ModuleBuilder& b, const MaceRadial& m, const std::vector<std::string>& species,
                         double cutoff) {
  // constants of the hyperparameters: not transferred by fine-tuning (SpeciesAxes::from_data)
  b.buffer("bessel_w", torch::tensor(m.frequencies(cutoff), torch::kFloat64), SpeciesAxes::from_data);
  // mace-torch's AgnesiTransform: r0 the mean covalent radius of the pair.
  if (m.agnesi) b.buffer("agnesi_r0", pair_radii(species, 0.5), SpeciesAxes::from_data);
}

std::string mace_edges_source(const MaceRadial& m, double cutoff) {
  if (!m.deferred()) return "    radial = " + bessel(m, cutoff, "r", m.p) + "\n";
  std::ostringstream src;
  src << "    env = " << envelope("(r / " + num(cutoff) + ")", m.p) << " * (r < " << num(cutoff) << ").to(r.dtype)\n"
      << "    radial = torch.cat([r, env], 1)\n";
  return src.str();
}

std::string mace_layer_radial_source(const MaceRadial& m, double cutoff) {
  if (!m.deferred()) return "    w_in = radial\n";
  std::ostringstream src;
  src << "    r = radial.narrow(1, 0, 1)\n"
      << "    env = radial.narrow(1, 1, 1)\n";
  if (m.agnesi) {
    src << "    sp = torch.argmax(attrs, 1)\n"
        << "    xr = r / self.agnesi_r0[sp.index_select(0, center), sp.index_select(0, neighbor)].unsqueeze(1)\n"
        << "    r = 1.0 / (1.0 + " << num(m.agnesi_a) << " * torch.pow(xr, " << num(m.agnesi_q) << ") / (1.0 + torch.pow(xr, "
        << num(m.agnesi_q - m.agnesi_p) << ")))\n";
  }
  src << "    w_in = " << bessel(m, cutoff, "r", 0) << (m.apply_cutoff ? " * env" : "") << "\n";
  return src.str();
}

std::string mace_gate(const MaceRadial& m, const std::string& x) {
  if (m.gate == "silu") return "torch.silu(" + x + ") * " + num(o3::kSiluNorm);
  if (m.gate == "tanh") return "torch.tanh(" + x + ") * " + num(kTanhNorm);
  if (m.gate == "abs") return "torch.abs(" + x + ") * " + num(kAbsNorm);
  return x;
}

std::string mace_zbl_source(ModuleBuilder& b, const MaceRadial& m, const std::vector<std::string>& species) {
  if (!m.zbl) return "";
  std::vector<double> z;
  for (const auto& el : species) z.push_back(double(atomic_number(el)));
  b.buffer("zbl_z", torch::tensor(z, torch::kFloat64), SpeciesAxes::from_data);
  b.buffer("zbl_rmax", pair_radii(species, 1.0), SpeciesAxes::from_data);
  // mace-torch's ZBLBasis: half of each pair's screened Coulomb energy, times the polynomial
  // envelope over the sum of the covalent radii, to each end of the edge.
  std::ostringstream src;
  src << "    zbl_r = torch.sqrt((edge_vectors * edge_vectors).sum(1))\n"
      << "    zbl_c = species.index_select(0, edge_index[0])\n"
      << "    zbl_n = species.index_select(0, edge_index[1])\n"
      << "    zbl_zc = self.zbl_z.index_select(0, zbl_c)\n"
      << "    zbl_zn = self.zbl_z.index_select(0, zbl_n)\n"
      << "    zbl_x = zbl_r * (torch.pow(zbl_zc, " << num(m.zbl_a_exp) << ") + torch.pow(zbl_zn, " << num(m.zbl_a_exp)
      << ")) / " << num(m.zbl_a_prefactor * 0.529) << "\n"
      << "    zbl_phi = 0.1818 * torch.exp(-3.2 * zbl_x) + 0.5099 * torch.exp(-0.9423 * zbl_x)"
         " + 0.2802 * torch.exp(-0.4028 * zbl_x) + 0.02817 * torch.exp(-0.2016 * zbl_x)\n"
      << "    zbl_rmax = self.zbl_rmax[zbl_c, zbl_n]\n"
      << "    zbl_env = " << envelope("(zbl_r / zbl_rmax)", m.p) << " * (zbl_r < zbl_rmax).to(zbl_r.dtype)\n"
      << "    zbl_e = 7.1998 * zbl_zc * zbl_zn / zbl_r * zbl_phi * zbl_env\n"
      << "    e_zbl = torch.zeros([species.size(0)], dtype=edge_vectors.dtype, device=edge_vectors.device)"
         ".index_add(0, edge_index[0], zbl_e).narrow(0, 0, n_centers)\n";
  return src.str();
}

}  // namespace mlip::detail
