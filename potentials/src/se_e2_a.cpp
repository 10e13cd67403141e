// se_e2_a: DeePMD's smooth two-body embedding descriptor with the full (radial + angular)
// environment, and per-species fitting nets (Zhang et al., NeurIPS 2018; DeePMD-kit's se_e2_a).
//
// For each edge i->j with r = |r_ij| < rc:
//   s(r) = sw(r) / r, sw a C2 polynomial switch from 1 at rcut_smth to 0 at rc,
//   env_ij = [s / std_r, s x/(r std_a), s y/(r std_a), s z/(r std_a)]   (std per centre species)
//   G_ij = embedding_{species(j)}(s / std_r)                            (M1 features)
//          (embedding_{species(i), species(j)} with type_one_side: false)
//   T_i = (1/neighbor_norm) sum_j env_ij (x) G_ij                        (4 x M1)
//   D_i = T_i^T T_i[:, :M2]                                              (M1 x M2, invariant)
//   E_i = scale_{s_i} fitting_{s_i}(D_i) + shift_{s_i}
// Everything that enters T_i is a multiple of sw(r), so energy and forces go smoothly to zero as
// a neighbour reaches the cutoff. The environment is only scaled (not shifted) by its statistics,
// for the same reason: a shift would make an edge's contribution jump as it leaves the cutoff.
//
// With `sel` (per neighbour species, DeePMD-kit's meaning), the environment is shifted as
// DeePMD-kit shifts it: each centre has sel_t slots per neighbour species t, its neighbours fill
// some, the rest are empty (s = 0), and every slot's radial entry is (s - avg)/std_r, the mean and
// spread over all slots, empty ones included (per centre species). With b = -avg/std_r, an empty
// slot's entry, and G_t(b) its features,
//   T_i = (1/neighbor_norm) [ sum_j env_ij (x) G_ij + sum_t (sel_t - n_it) [b, 0, 0, 0] (x) G_t(b) ]
// (n_it: i's neighbours of species t), which is still smooth: a neighbour at the cutoff has
// env = [b, 0, 0, 0] and the input b, the empty slot it becomes. Edges beyond the cutoff (padding)
// count as neighbours and cancel in the same way; n_it > sel_t is allowed (DeePMD-kit would drop
// the farthest). The embedding input is then (s - avg)/std_r, as in DeePMD-kit.
//
// Hyperparameters (defaults): rcut_smth (0.5 rc), embedding ([25, 50, 100]), axis_neurons (16),
// fitting ([240, 240, 240]), type_one_side (true: one embedding net per neighbour species, as
// DeePMD-kit's option of that name; false: one per (centre, neighbour) species pair, ns^2 nets for
// the same cost per edge and more freedom, e.g. for O-H versus H-H), neighbor_norm (0: set from data as the mean neighbour count, which
// keeps T_i O(1) whatever the density; 100 until statistics are fitted; with sel, 0 means sum(sel)),
// sel ([]: no shift; one count per species: the shifted environment above; "auto" or "auto:R":
// DeePMD-kit's rule, R (1.1) times the most neighbours of each species a centre has in the
// statistics' frames, its integer part rounded up to a multiple of 4, set with the statistics).
#include <algorithm>
#include <cmath>
#include <numeric>
#include <sstream>

#include "builder.h"

namespace mlip {

namespace {

// The tanh layers of DeePMD's nets, y = tanh(x W[t] + b[t]), plus x when the width is kept
// or [x, x] when it doubles, emitted as TorchScript that evaluates them through sigmoids (the
// grouped forward's fitting nets excepted: tanh_layers below):
// tanh(z) = 2 sigmoid(2z) - 1, and LibTorch's CPU sigmoid costs a third of its tanh (float64
// AVX512: 0.75 against 2.24 ns per value). Each layer's output is kept as x = a u - c, with the
// scalars a and c known here; the next layer takes them into its weights and bias,
//   x W + b = u (a W) + (b - c colsum(W)),
// where freezing folds them into constants. The residual sums stay in that form
// (a [u, u] - c + 2 h - 1 = 2 ([u, u] + h) - (c + 1) when a = 2), so the only elementwise passes
// are the ones the tanh form needs. The function is the same; only the rounding differs.
struct Affine {
  double a = 1.0, c = 0.0;  // x = a u - c
};

using detail::num;

// x W + b for x = a u - c, as (weight, bias) expressions (no product by a factor of 1).
std::pair<std::string, std::string> folded(const std::string& w, const std::string& b, Affine x, double scale) {
  const auto times = [](const std::string& e, double f) { return f == 1.0 ? e : e + " * " + num(f); };
  const std::string weight = times(w, scale * x.a);
  const std::string bias = x.c == 0.0 ? times(b, scale) : "(" + b + " - " + num(x.c) + " * " + w + ".sum(0)) * " + num(scale);
  return {weight, bias};
}

// The residual term of a tanh layer `in` -> `out` on `var`, as the start of a sum: "var + ",
// "torch.cat([var, var], dim) + " or nothing (detail::residual_kind).
std::string residual_part(const std::string& var, int64_t in, int64_t out, int dim) {
  const int kind = detail::residual_kind(in, out);
  if (kind == 1) return var + " + ";
  if (kind == 2) return "torch.cat([" + var + ", " + var + "], " + std::to_string(dim) + ") + ";
  return {};
}

// The same layers in their tanh form, y = tanh(x W + b) (+ x or [x, x]): no folding, so no
// products of the parameters by constants, which a training step (parameters not frozen) runs
// forward, backward and twice backward; a GPU's tanh costs what its sigmoid does. For the grouped
// forward only, which runs where the kernels are counted (a GPU; the CPU's steps are ungrouped
// unless training.grouped).
Affine tanh_layers(std::ostringstream& src, const std::string& var, const std::string& prefix,
                   const std::vector<int64_t>& widths, const std::string& indent, const std::string& owner) {
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    const std::string w = owner + prefix + "_w" + std::to_string(l) + "[t]";
    const std::string b = owner + prefix + "_b" + std::to_string(l) + "[t]";
    const std::string h = "torch.tanh(" + std::string(widths[l] == 1 ? "torch.addcmul(" : "torch.addmm(") + b + ", " +
                          var + ", " + w + "))";
    src << indent << var << " = " << residual_part(var, widths[l], widths[l + 1], 1) << h << "\n";
  }
  return Affine{};
}

// The same tanh layers for every species at once, on x (species, n, width) with the module's
// stacked parameters (species, in, out) and (species, out): one batched product a layer for all
// the nets, whose gradients are the stacked parameters' own (no unbind, no per-net copies).
void batched_tanh_layers(std::ostringstream& src, const std::string& var, const std::string& prefix,
                         const std::vector<int64_t>& widths, const std::string& indent) {
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    const std::string p = "self." + prefix, n = std::to_string(l);
    const std::string h = "torch.tanh(torch.baddbmm(" + p + "_b" + n + ".unsqueeze(1), " + var + ", " + p + "_w" + n + "))";
    src << indent << var << " = " << residual_part(var, widths[l], widths[l + 1], 2) << h << "\n";
  }
}

// The layers of net t, whose parameters are `owner` + prefix_w<l>[t] and prefix_b<l>[t] ("self.":
// the module's; "": the lists unbound_parameters() made).
Affine dense_layers(std::ostringstream& src, const std::string& var, const std::string& prefix,
                    const std::vector<int64_t>& widths, const std::string& indent, const std::string& owner = "self.") {
  Affine x;
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    const std::string w = owner + prefix + "_w" + std::to_string(l) + "[t]";
    const std::string b = owner + prefix + "_b" + std::to_string(l) + "[t]";
    const int kind = detail::residual_kind(widths[l], widths[l + 1]);
    const bool keep = kind == 1, doubles = kind == 2;
    if ((keep || doubles) && x.a != 2.0) {  // bring x to 2 u - c first (only when the first layer is residual)
      src << indent << var << " = " << var << " * " << num(x.a / 2.0) << "\n";
      x.a = 2.0;
    }
    const auto [weight, bias] = folded(w, b, x, 2.0);  // sigmoid(2 z), of the u just written
    // A one-wide input (the embedding's s) is an outer product: one addcmul, not a GEMM.
    const std::string h = widths[l] == 1 ? "torch.sigmoid(torch.addcmul(" + bias + ", " + var + ", " + weight + "))"
                                         : "torch.sigmoid(torch.addmm(" + bias + ", " + var + ", " + weight + "))";
    if (keep || doubles) {
      src << indent << var << " = " << (keep ? var : "torch.cat([" + var + ", " + var + "], 1)") << " + " << h << "\n";
      x.c += 1.0;
    } else {
      src << indent << var << " = " << h << "\n";
      x = Affine{2.0, 1.0};
    }
  }
  return x;
}

// Local lists of each net's parameters, prefix_w<l> = self.prefix_w<l>.unbind(0) for layers
// [0, layers), so that net t's are prefix_w<l>[t]: in a training step, one gradient (a stack) per
// parameter instead of one per net (a select's: a zero tensor of the whole parameter, a copy, a
// sum). Freezing folds either form into the same constants.
void unbound_parameters(std::ostringstream& src, const std::string& prefix, std::size_t layers, const std::string& indent) {
  for (std::size_t l = 0; l < layers; ++l)
    for (const char* kind : {"_w", "_b"}) {
      const std::string name = prefix + kind + std::to_string(l);
      src << indent << name << " = self." << name << ".unbind(0)\n";
    }
}

// tanh_net's arguments for the embedding net t: [emb_w0[t], emb_b0[t], ...] (unbound_parameters)
// and the residual kind of each layer (DeePMD's rule: identity when the width is kept, [x, x] when
// doubled).
std::string tanh_net_params(const std::vector<int64_t>& widths) {
  std::string out = "[";
  for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
    out += (l ? ", " : "") + std::string("emb_w") + std::to_string(l) + "[t], emb_b" + std::to_string(l) + "[t]";
  }
  return out + "]";
}

std::string tanh_net_residual(const std::vector<int64_t>& widths) {
  std::string out = "[";
  for (const int64_t kind : detail::residual_kinds(widths)) out += (out.size() > 1 ? ", " : "") + std::to_string(kind);
  return out + "]";
}

// padding(): the empty slots' part of T with `sel` (the header's formula), (n_centers, 4, M1),
// only the radial row: b_i sum_t (slots_t - n_it) G_t(b_i) over the embedding nets t, b_i =
// -avg/std_r of i's species, n_it its edges evaluated by net t (`net`, per edge) and slots_t the
// sel of net t's neighbour species where t is a net of i's species (0 otherwise). Counting by the
// net that evaluated an edge, not by its ends' species, keeps a padding edge (beyond the cutoff,
// in any group: mlip/model/grouped_graph.h) cancelling its own term exactly.
void padding_method(std::ostringstream& src, int64_t ns, bool one_side, int64_t m1) {
  const std::string n = std::to_string(ns), m = std::to_string(m1), nets = std::to_string(one_side ? ns : ns * ns);
  src << "def padding(self, species: Tensor, center: Tensor, net: Tensor, n_centers: int) -> Tensor:\n"
      << "    cs = species[:n_centers]\n"
      << "    one = torch.ones([net.size(0)], dtype=self.env_sel.dtype, device=net.device)\n"
      << "    counts = torch.zeros([n_centers * " << nets << "], dtype=one.dtype, device=net.device)"
      << ".index_add(0, center * " << nets << " + net, one).view(n_centers, " << nets << ")\n"
      << "    slots = " << (one_side ? "self.env_sel.unsqueeze(0).expand(" + n + ", " + n + ")"
                                   : "torch.kron(torch.eye(" + n + ", dtype=one.dtype, device=net.device), self.env_sel.unsqueeze(0))")
      << "\n"
      << "    b = -self.env_avg / self.env_std[:, 0]\n"
      << "    g: List[Tensor] = []\n"
      << "    for c in range(" << n << "):\n"
      << "        for t in range(" << nets << "):\n"
      << "            g.append(self.embedding(b[c].reshape([1, 1]), t))\n"
      << "    g_empty = torch.cat(g).view(" << n << ", " << nets << ", " << m << ")\n"
      << "    empty = slots.index_select(0, cs) - counts\n"
      << "    row = b[cs].unsqueeze(1) * torch.bmm(empty.unsqueeze(1), g_empty.index_select(0, cs)).squeeze(1)\n"
      << "    return torch.cat([row.unsqueeze(1), torch.zeros([n_centers, 3, " << m << "], dtype=row.dtype, device=row.device)], 1)\n\n";
}

// `sel` as given: a count per species, or "auto[:R]" (R > 0, 1.1 by default; 0 returned for a list).
double auto_sel_ratio(const nlohmann::json& sel, const detail::HyperParameters& hp) {
  if (!sel.is_string()) return 0.0;
  const std::string text = sel.get<std::string>();
  if (text == "auto") return 1.1;
  if (text.rfind("auto:", 0) == 0) {
    char* end = nullptr;
    const double r = std::strtod(text.c_str() + 5, &end);
    if (end != text.c_str() + 5 && *end == '\0' && r > 0.0 && std::isfinite(r)) return r;
  }
  hp.fail("sel", "must be a count per species, \"auto\" or \"auto:R\" with R > 0 (got \"" + text + "\")");
}

// The most neighbours of each species a centre has in `frames`, times `ratio`, its integer part
// rounded up to a multiple of 4 (DeePMD-kit's "auto").
std::vector<int64_t> auto_sel(const std::vector<const Frame*>& frames, const SpeciesMap& species, std::size_t ns,
                              double ratio) {
  std::vector<int64_t> most(ns, 0);
  for (const Frame* f : frames) {
    const Structure& st = f->structure;
    std::vector<int64_t> counts(st.size() * ns, 0);
    for (std::size_t e = 0; e < f->num_edges(); ++e) {
      const auto t = static_cast<std::size_t>(species.index(st.numbers[f->neighbors[e]], st.origin));
      const int64_t n = ++counts[static_cast<std::size_t>(f->centers[e]) * ns + t];
      most[t] = std::max(most[t], n);
    }
  }
  std::vector<int64_t> sel(ns);
  for (std::size_t t = 0; t < ns; ++t) sel[t] = 4 * ((static_cast<int64_t>(static_cast<double>(most[t]) * ratio) + 3) / 4);
  return sel;
}

}  // namespace

BuiltModel build_se_e2_a(const ModelSpec& spec) {
  detail::HyperParameters hp(spec.hyperparameters, "se_e2_a");
  const double rc = spec.cutoff;
  const double rcut_smth = hp.get<double>("rcut_smth", 0.5 * rc);
  const auto embedding = hp.get<std::vector<int64_t>>("embedding", {25, 50, 100});
  const auto axis = hp.get<int64_t>("axis_neurons", 16);
  const auto fitting = hp.get<std::vector<int64_t>>("fitting", {240, 240, 240});
  const double neighbor_norm = hp.get<double>("neighbor_norm", 0.0);
  const bool one_side = hp.get<bool>("type_one_side", true);
  const auto sel_given = hp.get<nlohmann::json>("sel", nlohmann::json::array());
  const bool sel_auto = auto_sel_ratio(sel_given, hp) > 0.0;
  std::vector<int64_t> sel;
  if (!sel_auto) {
    try {
      sel = sel_given.get<std::vector<int64_t>>();
    } catch (const nlohmann::json::exception&) {
      hp.fail("sel", "must be a count per species, \"auto\" or \"auto:R\" (got " + sel_given.dump() + ")");
    }
  }
  const nlohmann::json resolved = hp.finish();
  if (!(rcut_smth >= 0.0 && rcut_smth < rc)) hp.fail("rcut_smth", "must be in [0, cutoff)");
  if (embedding.empty()) hp.fail("embedding", "needs at least one layer");
  for (auto w : embedding) if (w < 1) hp.fail("embedding", "widths must be positive");
  for (auto w : fitting) if (w < 1) hp.fail("fitting", "widths must be positive");
  const int64_t m1 = embedding.back();
  if (axis < 1 || axis > m1) hp.fail("axis_neurons", "must be in [1, last embedding width]");
  if (neighbor_norm < 0.0) hp.fail("neighbor_norm", "must be positive (or 0: from data)");
  const int64_t ns = static_cast<int64_t>(spec.species.size());
  if (!sel.empty() && static_cast<int64_t>(sel.size()) != ns)
    hp.fail("sel", "needs one count per species (" + std::to_string(ns) + "), in the order of model.species");
  for (auto n : sel) if (n < 0) hp.fail("sel", "counts must not be negative");
  const bool shifted = !sel.empty() || sel_auto;   // with "auto", the counts come with the statistics
  const double sel_total = static_cast<double>(std::accumulate(sel.begin(), sel.end(), int64_t{0}));
  if (!sel.empty() && neighbor_norm == 0.0 && sel_total == 0.0) hp.fail("sel", "sums to 0: give neighbor_norm");

  detail::ModuleBuilder b("SeE2A", torch_dtype(spec), spec.seed);
  const int64_t n_emb = one_side ? ns : ns * ns;  // embedding nets
  std::vector<int64_t> emb_widths = {1};
  emb_widths.insert(emb_widths.end(), embedding.begin(), embedding.end());
  for (std::size_t l = 0; l + 1 < emb_widths.size(); ++l) {
    const int64_t in = emb_widths[l], out = emb_widths[l + 1];
    const SpeciesAxes per_net = one_side ? SpeciesAxes::species : SpeciesAxes::species_pair;
    b.normal("emb_w" + std::to_string(l), {n_emb, in, out}, 1.0 / std::sqrt(double(in + out)), per_net);
    b.normal("emb_b" + std::to_string(l), {n_emb, out}, 1.0, per_net);
    b.descriptor("emb_w" + std::to_string(l));
    b.descriptor("emb_b" + std::to_string(l));
  }
  std::vector<int64_t> fit_widths = {m1 * axis};
  fit_widths.insert(fit_widths.end(), fitting.begin(), fitting.end());
  for (std::size_t l = 0; l + 1 < fit_widths.size(); ++l) {
    const int64_t in = fit_widths[l], out = fit_widths[l + 1];
    b.normal("fit_w" + std::to_string(l), {ns, in, out}, 1.0 / std::sqrt(double(in + out)), SpeciesAxes::species);
    b.normal("fit_b" + std::to_string(l), {ns, out}, 1.0, SpeciesAxes::species);
  }
  const int64_t last = fit_widths.back();
  const std::string out_l = std::to_string(fit_widths.size() - 1);
  b.normal("fit_w" + out_l, {ns, last, 1}, 1.0 / std::sqrt(double(last + 1)), SpeciesAxes::species);
  b.constant("fit_b" + out_l, {ns, 1}, 0.0, SpeciesAxes::species);
  b.buffer("env_std", torch::ones({ns, 2}), SpeciesAxes::species);   // [radial, angular] per centre species, from data
  const double norm = neighbor_norm > 0 ? neighbor_norm : !sel.empty() ? sel_total : 100.0;
  b.buffer("inv_neighbor_norm", torch::full({1}, 1.0 / norm, torch::kFloat64));
  if (shifted) {
    b.buffer("env_avg", torch::zeros({ns}), SpeciesAxes::species);   // radial mean per centre species, from data
    b.buffer("env_sel", sel_auto ? torch::zeros({ns}, torch::kFloat64) : torch::tensor(sel, torch::kFloat64),
             SpeciesAxes::species);
  }
  detail::add_energy_buffers(b, ns);
  b.float_attribute("cutoff", rc);
  b.float_attribute("rcut_smth", rcut_smth);

  // Methods, so that a compressed model (potentials/src/compress.cpp) can reuse the frozen
  // environment, embedding and fitting: export keeps them (export_frozen's preserved methods).
  std::ostringstream src;
  src << "def environment(self, species: Tensor, edge_index: Tensor, edge_vectors: Tensor)"
      << " -> Tuple[Tensor, Tensor, Tensor]:\n"
      << "    center = edge_index[0]\n"
      << "    neighbor = edge_index[1]\n"
      // radial = (s - avg) / std_r and env = [radial, s v / (r std_a)], s = sw(r) / r, as one
      // operator with its derivatives written out (mlip/ops/se_environment.h)
      << "    sc = species[center]\n"
      << "    radial, env = mlip_ops.se_environment(edge_vectors, "
      << (shifted ? "self.env_avg[sc]" : "edge_vectors.new_zeros([0])")
      << ", self.env_std[sc], self.rcut_smth, self.cutoff)\n"
      << (one_side ? "    net = species[neighbor]\n"
                   : "    net = sc * " + std::to_string(ns) + " + species[neighbor]\n")
      << "    return radial, env, net\n\n";
  // Embedding net t on x (K, 1), as x' with G = a x' - c (the affine part folds into its users).
  src << "def embedding_raw(self, x: Tensor, t: int) -> Tensor:\n";
  const Affine g = dense_layers(src, "x", "emb", emb_widths, "    ");
  src << "    return x\n\n"
      << "def embedding(self, x: Tensor, t: int) -> Tensor:\n"
      << "    return self.embedding_raw(x, t) * " << num(g.a) << " - " << num(g.c) << "\n\n";
  if (shifted) padding_method(src, ns, one_side, m1);
  // Per-atom energies from T_i = sum_j env_ij (x) G_ij (n_centers, 4, M1), species by species:
  // energies() picks each species' centres (nonzero: a size known only on the device),
  // energies_grouped() takes them as consecutive groups of sizes known on the host (the static
  // shapes a CUDA graph records, mlip/model/grouped_graph.h).
  const auto fitting_net = [&](const std::string& indent, bool tanh_form) {
    // y (n, 4, M1) -> per-atom energies of species t, as `y`
    const Affine y = tanh_form ? tanh_layers(src, "y", "fit", fit_widths, indent, "")
                               : dense_layers(src, "y", "fit", fit_widths, indent, "");
    const auto [w_out, b_out] = folded("fit_w" + out_l + "[t]", "fit_b" + out_l + "[t]", y, 1.0);
    src << indent << "y = torch.addmm(" << b_out << ", y, " << w_out << ")\n";
  };
  const auto descriptor = [&](const std::string& n) {
    return "        y = torch.bmm(ts.transpose(1, 2), ts.narrow(2, 0, " + std::to_string(axis) + ")).reshape(" + n +
           ", " + std::to_string(m1 * axis) + ")\n";
  };
  src << "def energies(self, species: Tensor, t_sum: Tensor, n_centers: int) -> Tensor:\n";
  unbound_parameters(src, "fit", fit_widths.size(), "    ");
  src << "    tm = t_sum * self.inv_neighbor_norm\n"
      << "    cs = species[:n_centers]\n"
      << "    e = torch.zeros([n_centers], dtype=t_sum.dtype, device=t_sum.device)\n"
      << "    for t in range(" << ns << "):\n"
      << "        idx = torch.nonzero(cs == t).squeeze(1)\n"
      // Centres picked before the descriptor: the gather's backward fills a (n, 4, M1) zero
      // tensor, not an (n, M1 x axis) one.
      << "        ts = tm.index_select(0, idx)\n"
      << descriptor("idx.size(0)");
  fitting_net("        ", false);
  src << "        e = e.index_copy(0, idx, y.squeeze(1))\n"
      << "    return e * self.energy_scale[cs] + self.energy_shift[cs]\n\n";
  // Groups of equal sizes (the trainer's recorded steps pad them so where that costs little:
  // recorded_step.h) take every species' net at once, one batched product a layer; other groups
  // go species by species, split by split_with_sizes, not narrow: one gradient for all (a cat),
  // not one per group.
  src << "def energies_grouped(self, species: Tensor, t_sum: Tensor, center_groups: List[int]) -> Tensor:\n"
      << "    cs = species[:t_sum.size(0)]\n"
      << "    n = center_groups[0]\n"
      << "    equal = True\n"
      << "    for c in center_groups:\n"
      << "        equal = equal and c == n\n"
      << "    if equal:\n"
      << "        ts = t_sum * self.inv_neighbor_norm\n"
      << descriptor(std::to_string(ns) + ", n");
  batched_tanh_layers(src, "y", "fit", fit_widths, "        ");
  src << "        e = torch.baddbmm(self.fit_b" << out_l << ".unsqueeze(1), y, self.fit_w" << out_l
      << ").reshape(t_sum.size(0))\n"
      << "    else:\n";
  unbound_parameters(src, "fit", fit_widths.size(), "        ");
  src << "        tm = (t_sum * self.inv_neighbor_norm).split_with_sizes(center_groups)\n"
      << "        parts: List[Tensor] = []\n"
      << "        for t in range(" << ns << "):\n"
      << "            n = center_groups[t]\n"
      << "            ts = tm[t]\n"
      << "    " << descriptor("n");
  fitting_net("            ", true);
  src << "            parts.append(y.squeeze(1))\n"
      << "        e = torch.cat(parts)\n"
      << "    return e * self.energy_scale[cs] + self.energy_shift[cs]\n\n";
  const std::string repulsion = detail::add_repulsion(b, spec);
  if (!repulsion.empty()) {
    src << "def repulsion(self, species: Tensor, edge_index: Tensor, edge_vectors: Tensor, n_centers: int) -> Tensor:\n"
        << repulsion << "    return e_rep\n\n"
        << "def repulsion_all_edges(self, species: Tensor, edge_index: Tensor, edge_vectors: Tensor, n_centers: int)"
        << " -> Tensor:\n"
        << detail::repulsion_source(false) << "    return e_rep\n\n";
  }
  src << "def forward(self, species: Tensor, edge_index: Tensor, edge_vectors: Tensor, n_centers: int) -> Tensor:\n";
  unbound_parameters(src, "emb", emb_widths.size() - 1, "    ");
  src << "    center = edge_index[0]\n"
      << "    radial, env, net = self.environment(species, edge_index, edge_vectors)\n"
      // T_i = sum_j env_ij (x) G_ij, net by net: the operator adds each edge's outer product into
      // its centre's sum in one pass (no dense centre x neighbour-slot copy of G).
      << "    t_sum = torch.zeros([n_centers, 4, " << m1 << "], dtype=edge_vectors.dtype, device=edge_vectors.device)\n"
      << "    for t in range(" << n_emb << "):\n"
      << "        idx = torch.nonzero(net == t).squeeze(1)\n"
      // The net with its derivative in one operator (mlip/ops/radial_net.h): the same function as
      // embedding(), cheaper to differentiate twice (a force loss).
      << "        g, g_dx = mlip_ops.tanh_net(radial.index_select(0, idx), " << tanh_net_params(emb_widths)
      << ", " << tanh_net_residual(emb_widths) << ")\n"
      << "        t_sum = t_sum + mlip_ops.edge_outer_sum(env.index_select(0, idx), g, center.index_select(0, idx), n_centers)\n"
      << (shifted ? "    t_sum = t_sum + self.padding(species, center, net, n_centers)\n" : "")
      << "    return self.energies(species, t_sum, n_centers)"
      << (repulsion.empty() ? "" : " + self.repulsion(species, edge_index, edge_vectors, n_centers)") << "\n";

  // The same sums with edges grouped by net and centres by species (mlip/model/grouped_graph.h);
  // with a repulsion prior, the learned part alone is forward_grouped_learned() (the trainer's
  // steps on data where the prior is zero: prior_is_zero_on()).
  const std::string grouped_args = "(self, species: Tensor, edge_index: Tensor, edge_vectors: Tensor, n_centers: int,"
                                   " center_groups: List[int], edge_groups: List[int]) -> Tensor:\n";
  if (!repulsion.empty()) {
    src << "\ndef forward_grouped" << grouped_args
        << "    return self.forward_grouped_learned(species, edge_index, edge_vectors, n_centers, center_groups, edge_groups)"
        << " + self.repulsion_all_edges(species, edge_index, edge_vectors, n_centers)\n";
  }
  src << "\ndef " << (repulsion.empty() ? "forward_grouped" : "forward_grouped_learned") << grouped_args;
  unbound_parameters(src, "emb", emb_widths.size() - 1, "    ");
  src << "    center = edge_index[0]\n"
      << "    radial, env, net = self.environment(species, edge_index, edge_vectors)\n"
      << "    radials = radial.split_with_sizes(edge_groups)\n"
      << "    gs: List[Tensor] = []\n"
      << (shifted ? "    group_net: List[Tensor] = []\n" : "")
      << "    for t in range(" << n_emb << "):\n"
      << "        n = edge_groups[t]\n"
      // the net that evaluates each edge here is its group's (padding edges' too): padding() counts by it
      << (shifted ? "        group_net.append(torch.full([n], t, dtype=center.dtype, device=center.device))\n" : "")
      << "        g, g_dx = mlip_ops.tanh_net(radials[t], " << tanh_net_params(emb_widths) << ", "
      << tanh_net_residual(emb_widths) << ")\n"
      << "        gs.append(g)\n"
      // every net's edges in one sum (the groups are consecutive): one operator, forward and
      // backward, for all the nets
      << "    t_sum = mlip_ops.edge_outer_sum(env, torch.cat(gs), center, n_centers)\n"
      << (shifted ? "    t_sum = t_sum + self.padding(species, center, torch.cat(group_net), n_centers)\n" : "")
      << "    return self.energies_grouped(species, t_sum, center_groups)\n";
  return b.finish(src.str(), spec, "se_e2_a", 0, resolved);
}

namespace {

// sel: "auto[:R]" becomes its counts from `frames`: in the metadata, env_sel and, with
// neighbor_norm 0, the norm (their sum).
void resolve_auto_sel(BuiltModel& model, const std::vector<const Frame*>& frames) {
  nlohmann::json& hp = model.metadata.hyperparameters;
  if (!hp.contains("sel") || !hp.at("sel").is_string()) return;
  const double ratio = auto_sel_ratio(hp.at("sel"), detail::HyperParameters(hp, "se_e2_a"));
  const std::size_t ns = model.metadata.species.size();
  const std::vector<int64_t> sel = auto_sel(frames, SpeciesMap(model.metadata.species), ns, ratio);
  const int64_t total = std::accumulate(sel.begin(), sel.end(), int64_t{0});
  if (total == 0)
    throw Error("se_e2_a: hyperparameter 'sel' \"auto\": the statistics' frames have no neighbours within the cutoff; give sel");
  hp["sel"] = sel;
  torch::NoGradGuard no_grad;  // setting buffers
  model.module.attr("env_sel").toTensor().copy_(torch::tensor(sel, torch::kFloat64));
  if (hp.at("neighbor_norm").get<double>() == 0.0)
    model.module.attr("inv_neighbor_norm").toTensor().fill_(1.0 / static_cast<double>(total));
}

}  // namespace

void fit_se_e2_a_statistics(BuiltModel& model, const std::vector<const Frame*>& frames) {
  resolve_auto_sel(model, frames);
  // The same environment as forward() computes (kept in step with it): s = sw(r)/r.
  const double rc = model.metadata.cutoff;
  const nlohmann::json& hp = model.metadata.hyperparameters;
  const double rs = hp.at("rcut_smth").get<double>();
  const auto sel = hp.value("sel", std::vector<int64_t>{});
  const SpeciesMap species(model.metadata.species);
  const std::size_t ns = model.metadata.species.size();
  // Per centre species: sums of s, s^2, the angular entries s x/r (over the 3) and their squares.
  std::vector<double> sum_r(ns, 0.0), sum_r2(ns, 0.0), sum_a(ns, 0.0), sum_a2(ns, 0.0), count(ns, 0.0), centers(ns, 0.0);
  double edges = 0;
  for (const Frame* f : frames) {
    const Structure& st = f->structure;
    for (std::size_t i = 0; i < st.size(); ++i) centers[static_cast<std::size_t>(species.index(st.numbers[i], st.origin))] += 1;
    edges += static_cast<double>(f->num_edges());
    for (std::size_t e = 0; e < f->num_edges(); ++e) {
      const int i = f->centers[e];
      const Vec3 r = f->edge_vector(e);
      const double len = norm(r);
      const double u = std::clamp((len - rs) / (rc - rs), 0.0, 1.0);
      const double s = (u * u * u * (-6.0 * u * u + 15.0 * u - 10.0) + 1.0) / len;
      const auto t = static_cast<std::size_t>(species.index(st.numbers[i], st.origin));
      sum_r[t] += s;
      sum_r2[t] += s * s;
      sum_a[t] += s * (r[0] + r[1] + r[2]) / (3.0 * len);
      sum_a2[t] += s * s / 3.0;  // mean over the three components of s r/|r|
      count[t] += 1.0;
    }
  }
  torch::NoGradGuard no_grad;  // setting buffers, not evaluating
  double all_centers = 0;
  for (double c : centers) all_centers += c;
  if (hp.at("neighbor_norm").get<double>() == 0.0 && sel.empty() && edges > 0) {
    model.module.attr("inv_neighbor_norm").toTensor().fill_(all_centers / edges);
  }
  torch::Tensor env_std = model.module.attr("env_std").toTensor();
  if (sel.empty()) {
    for (std::size_t t = 0; t < ns; ++t) {
      if (count[t] == 0) continue;  // species absent from these frames: keep 1
      env_std[t][0] = std::max(std::sqrt(sum_r2[t] / count[t]), 1e-6);
      env_std[t][1] = std::max(std::sqrt(sum_a2[t] / count[t]), 1e-6);
    }
    return;
  }
  // DeePMD-kit's statistics: over all sum(sel) slots of each centre, the empty ones (zeros)
  // included; standard deviations below 0.01 are raised to it, as there.
  torch::Tensor env_avg = model.module.attr("env_avg").toTensor();
  const double slots = static_cast<double>(std::accumulate(sel.begin(), sel.end(), int64_t{0}));
  for (std::size_t t = 0; t < ns; ++t) {
    const double n = centers[t] * slots;
    if (n == 0) continue;  // species absent from these frames: keep 0 and 1
    const double avg = sum_r[t] / n, avg_a = sum_a[t] / n;
    env_avg[t] = avg;
    env_std[t][0] = std::max(std::sqrt(std::max(sum_r2[t] / n - avg * avg, 0.0)), 1e-2);
    env_std[t][1] = std::max(std::sqrt(std::max(sum_a2[t] / n - avg_a * avg_a, 0.0)), 1e-2);
  }
}

}  // namespace mlip
