// Short-range repulsion prior, shared by every architecture (model.repulsion in the config).
//
// A network trained on near-equilibrium data knows nothing about atoms closer than any pair in
// its training set; in MD it may well be attractive there, and atoms fall into such holes (water
// models trained for minutes put O-O pairs at 1.7 Å). The prior adds, for each pair of species
// (a, b), the universal ZBL screened nuclear repulsion (Ziegler, Biersack, Littmark 1985)
//
//   V(r) = 14.399645 Z_a Z_b / r * sum_k c_k exp(-d_k r / a),  a = 0.46850 / (Z_a^0.23 + Z_b^0.23)
//
// switched on below the pair's inner radius r_in(a, b):
//
//   E_i += 1/2 sum_j V(r_ij) sw(r_ij),  sw = 1 below r_in - width, 0 above r_in, C2 in between.
//
// r_in(a, b) is the shortest a-b distance in the training set (fit_repulsion), so the prior is
// exactly zero on every training structure: it changes nothing the network learns and only
// acts where the network has never seen data. This is DeePMD-kit's idea of a short-range table
// blended in below sw_rmax, NequIP/MACE's ZBL term and pacemaker's data-set inner cutoff, in
// one smooth, parameter-free form. Pairs the data never showed keep r_in = 0 (no prior).
#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "builder.h"
#include "mlip/data/elements.h"
#include "mlip/error.h"

namespace mlip {

namespace detail {

std::string add_repulsion(ModuleBuilder& b, const ModelSpec& spec) {
  const int64_t ns = static_cast<int64_t>(spec.species.size());
  if (spec.repulsion == "none") return "";
  if (spec.repulsion != "zbl") throw Error("model: repulsion '" + spec.repulsion + "' is not known (none, zbl)");
  if (!(spec.repulsion_width > 0.0)) throw Error("model: repulsion_width must be positive");
  std::vector<double> z;
  for (const auto& el : spec.species) z.push_back(static_cast<double>(atomic_number(el)));
  b.buffer("rep_z", torch::tensor(z, torch::kFloat64), SpeciesAxes::from_data);
  b.buffer("rep_inner", torch::zeros({ns, ns}), SpeciesAxes::from_data);  // r_in(a, b), Å; set by fit_repulsion
  b.float_attribute("rep_width", spec.repulsion_width);
  b.float_attribute("rep_max", 0.0);              // max of rep_inner, Å; set by fit_repulsion
  return repulsion_source(true);
}

std::string repulsion_source(bool near_edges_only) {
  std::ostringstream src;
  if (near_edges_only) {
    // Only edges shorter than the largest inner radius can feel the prior: they are picked first,
    // so in training, where there are none, the prior costs one comparison per edge.
    src << "    rep_sel = torch.nonzero((edge_vectors * edge_vectors).sum(1) < self.rep_max * self.rep_max).squeeze(1)\n"
        << "    rep_v = edge_vectors.index_select(0, rep_sel)\n"
        << "    rep_i = edge_index[0].index_select(0, rep_sel)\n"
        << "    rep_sn = species[edge_index[1].index_select(0, rep_sel)]\n";
  } else {
    // Every edge (static shapes): the switch is exactly 0, with a zero derivative, beyond r_in.
    src << "    rep_v = edge_vectors\n"
        << "    rep_i = edge_index[0]\n"
        << "    rep_sn = species[edge_index[1]]\n";
  }
  // Per edge: sc, sn the centre and neighbour species; the energy goes to the centre (half the
  // pair), on every node, of which the first n_centers are returned.
  src << "    rep_r = torch.sqrt((rep_v * rep_v).sum(1))\n"
      << "    rep_sc = species[rep_i]\n"
      << "    rep_zc = self.rep_z[rep_sc]\n"
      << "    rep_zn = self.rep_z[rep_sn]\n"
      << "    rep_x = rep_r * ((torch.pow(rep_zc, 0.23) + torch.pow(rep_zn, 0.23)) / 0.4685)\n"
      << "    rep_phi = 0.18175 * torch.exp(-3.19980 * rep_x) + 0.50986 * torch.exp(-0.94229 * rep_x)"
         " + 0.28022 * torch.exp(-0.40290 * rep_x) + 0.02817 * torch.exp(-0.20162 * rep_x)\n"
      << "    rep_hi = self.rep_inner[rep_sc, rep_sn]\n"
      << "    rep_u = torch.clamp((rep_r - rep_hi + self.rep_width) / self.rep_width, 0.0, 1.0)\n"
      << "    rep_sw = 1.0 - rep_u * rep_u * rep_u * (6.0 * rep_u * rep_u - 15.0 * rep_u + 10.0)\n"
      << "    rep_e = (7.1998225 * rep_zc * rep_zn) * rep_phi * rep_sw / rep_r\n"
      << "    e_rep = torch.zeros([species.size(0)], dtype=edge_vectors.dtype, device=edge_vectors.device)"
         ".index_add(0, rep_i, rep_e).narrow(0, 0, n_centers)\n";
  return src.str();
}

}  // namespace detail

void fit_repulsion(BuiltModel& model, const std::vector<const Frame*>& frames) {
  if (!model.module.hasattr("rep_inner")) return;
  const SpeciesMap species(model.metadata.species);
  const std::size_t ns = model.metadata.species.size();
  std::vector<double> rmin(ns * ns, std::numeric_limits<double>::infinity());
  for (const Frame* f : frames) {
    const Structure& st = f->structure;
    for (std::size_t e = 0; e < f->num_edges(); ++e) {
      const int i = f->centers[e], j = f->neighbors[e];
      const Vec3 r = f->edge_vector(e);
      const auto a = static_cast<std::size_t>(species.index(st.numbers[i], st.origin));
      const auto b = static_cast<std::size_t>(species.index(st.numbers[j], st.origin));
      const double len = norm(r);
      rmin[a * ns + b] = std::min(rmin[a * ns + b], len);
      rmin[b * ns + a] = std::min(rmin[b * ns + a], len);
    }
  }
  fit_repulsion(model, rmin);
}

void fit_repulsion(BuiltModel& model, const std::vector<double>& rmin) {
  if (!model.module.hasattr("rep_inner")) return;
  const std::size_t ns = model.metadata.species.size();
  if (rmin.size() != ns * ns) throw Error("fit_repulsion: " + std::to_string(rmin.size()) + " shortest distances for " + std::to_string(ns) + " species");
  torch::NoGradGuard no_grad;  // setting a buffer
  torch::Tensor inner = model.module.attr("rep_inner").toTensor();
  nlohmann::json fitted = nlohmann::json::object();
  double rmax = 0.0;
  for (std::size_t a = 0; a < ns; ++a) {
    for (std::size_t b = 0; b < ns; ++b) {
      const double r = std::isfinite(rmin[a * ns + b]) ? rmin[a * ns + b] : 0.0;
      inner[a][b] = r;
      rmax = std::max(rmax, r);
      if (b >= a) fitted[model.metadata.species[a] + "-" + model.metadata.species[b]] = r;
    }
  }
  model.module.setattr("rep_max", rmax);
  model.metadata.hyperparameters["repulsion"]["inner"] = fitted;
}

}  // namespace mlip
