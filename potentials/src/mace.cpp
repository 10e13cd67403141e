// MACE: higher-order equivariant message passing (Batatia et al., NeurIPS 2022), the function of
// mace-torch's default model (`--model MACE`: ScaleShiftMACE with a plain first interaction and
// residual ones after it), so that models trained by mace-torch import exactly
// (python/mace_to_mlip.py) and models trained here mean the same hyperparameters.
//
// Per atom i with species s_i, features h_i (C channels of each l <= max_L; scalars only at first):
//   edges:  Y(r_ji) real spherical harmonics l <= max_ell (e3nn's basis, mlip/o3.h),
//           R(r) = sqrt(2/r_max) sin(n pi r / r_max) / r x polynomial envelope(p), n = 1..num_radial_basis
//   layer t: u = Linear(h)                                   (per l, channels mixed)
//            A_i = Linear(sum_j TP(u_j, Y(r_ji); MLP_t(R(r_ij)))) / avg_num_neighbors
//                  (uvu tensor product: each channel of u_j times Y, weighted per edge and path)
//            first layer: A_i = SkipTP(A_i, s_i) (channels mixed per species)
//            B_i = sum_nu=1..correlation  W_{s_i, nu} . U_nu . A_i^(x nu)   (symmetric contraction)
//            h_i' = Linear(B_i) (+ SkipTP(h_i, s_i) after the first layer)
//            e_i += readout_t(h_i')  (linear; a one-hidden-layer SiLU net at the last layer)
//   E_i = E0_{s_i} + scale e_i + shift   (energy_shift, energy_scale)
// Every linear map carries e3nn's normalisation (1/sqrt(fan-in)) and its weights e3nn's layout,
// so that an import copies tensors. The last layer keeps only scalars.
//
// The symmetric contraction is evaluated on the non-zero coefficients of U (symmetrised over the
// orders of the A's, which commute): the monomials of A each product needs, times the
// species' weights, summed into the outputs - about a thousandth of the dense U's work.
//
// Hyperparameters (mace-torch's names and defaults): num_channels (128), max_L (1), max_ell (3),
// correlation (3), num_interactions (2), num_radial_basis (8), num_cutoff_basis (5),
// radial_MLP ([64, 64, 64]), MLP_irreps ("16x0e"), avg_num_neighbors (0: from the training data),
// interaction_first (RealAgnosticInteractionBlock; RealAgnosticResidualInteractionBlock takes the
// first layer's skip into the product, as later layers do) and interaction
// (RealAgnosticResidualInteractionBlock; the Density variants of both divide the messages by
// 1 + sum_j tanh(radial_ij . w / sqrt(nb))^2 instead of avg_num_neighbors: MACE-MP-0b3, MPA-0,
// OMAT-0; RealAgnosticResidualNonLinearInteractionBlock, MACE-MH's, in either place: the radial
// MLP (Linear, LayerNorm, SiLU) reads the species embeddings of both ends too, the messages are
// divided by alpha + beta x a learnt density, a linear map of the senders' features is added, then
// a gate (SiLU scalars, sigmoid-gated l > 0) and a linear map; its skip connection is a Linear),
// edge_irreps ("", or "Cx0e+Cx1o+...": what linear_up maps to and the edge tensor product reads)
// with use_edge_irreps_first, and the variants of mace_radial.h:
// gate (silu), bessel_weights (n pi / r_max), distance_transform (None; Agnesi with `agnesi`
// {q, p, a}), apply_cutoff (true), pair_repulsion (false; ZBL with `zbl` {a_exp, a_prefactor}).
// r_max is the model's cutoff. heads ([]: one output) and head: a multi-head model (MACE-MH,
// mace-torch's multi-head fine-tuning) has per head its readouts, E0s and scale/shift (energy
// buffers (n_species, n_heads)) and shares the rest; forward() gives `head`'s energies (default
// the first), forward_heads(..., head) each node's head's (the trainer's, for data of several heads).
#include <cmath>
#include <map>
#include <sstream>

#include "builder.h"
#include "mace_radial.h"
#include "mlip/o3.h"

namespace mlip {
namespace {

using detail::num;

// e3nn's normalize2mom constant of the sigmoid (mace-torch's GatedEquivariantBlock's gates).
constexpr double kSigmoidNorm = 1.8467055342154763;

struct Shape {
  int64_t C = 128, N = 1;
  int Lh = 1, Ls = 3, corr = 3, layers = 2, nb = 8, p = 5, mlp = 16;
  std::vector<int64_t> radial;
  bool residual_first = false;  // interaction_first: mace-torch's residual block (its skip in the product)
  bool density_first = false, density_rest = false;  // the Density blocks' normalisation
  bool nonlinear_first = false, nonlinear_rest = false;  // the non-linear residual blocks (MACE-MH)
  int64_t Ce = 0;               // edge_irreps: Ce channels of each l <= Le (0: the node irreps)
  int Le = 0;
  bool edge_first = false;      // use_edge_irreps_first: the first layer's edges carry Ce scalars
  detail::MaceRadial basis;     // radial basis, ZBL, gate (mace_radial.h)
  std::vector<std::string> heads;  // output heads (empty: one output, the single-head layouts)
  int64_t head = 0;             // the head forward() evaluates
  int64_t H() const { return heads.empty() ? 1 : int64_t(heads.size()); }
  bool residual(int t) const { return t > 0 || residual_first; }
  bool density(int t) const { return t == 0 ? density_first : density_rest; }
  bool nonlinear_block(int t) const { return t == 0 ? nonlinear_first : nonlinear_rest; }
  int64_t hidden_width() const { return C * (Lh + 1) * (Lh + 1); }
  std::vector<int> in_ls(int t) const { return t == 0 ? std::vector<int>{0} : range(Lh); }
  // The irreps the edge tensor product reads (linear_up's output): mace-torch's edge_irreps.
  std::vector<int> edge_ls(int t) const { return t == 0 ? std::vector<int>{0} : range(Ce > 0 ? Le : Lh); }
  int64_t edge_C(int t) const { return Ce > 0 && (t > 0 || edge_first) ? Ce : C; }
  // Channels of the message's block l: C, and in a non-linear block the scalars' gates with them.
  int64_t message_C(int t, int l) const { return nonlinear_block(t) && l == 0 ? C * (1 + Ls) : C; }
  std::vector<int> out_ls(int t) const { return t == layers - 1 ? std::vector<int>{0} : range(Lh); }
  static std::vector<int> range(int lmax) {
    std::vector<int> v;
    for (int l = 0; l <= lmax; ++l) v.push_back(l);
    return v;
  }
};

// One path of a layer's edge tensor product: input block l1 (of the node features) times
// harmonic l2 into l3, in e3nn's order (sorted by l3, then as generated).
struct Path {
  int block, l1, l2, l3;
};

std::vector<Path> tensor_product_paths(const Shape& s, int t) {
  std::vector<Path> paths;
  const auto in = s.edge_ls(t);
  for (std::size_t b = 0; b < in.size(); ++b)
    for (int l2 = 0; l2 <= s.Ls; ++l2)
      for (int l3 = std::abs(in[b] - l2); l3 <= in[b] + l2; ++l3)
        if (l3 <= s.Ls && (in[b] + l2 + l3) % 2 == 0) paths.push_back({int(b), in[b], l2, l3});
  std::stable_sort(paths.begin(), paths.end(), [](const Path& a, const Path& b) { return a.l3 < b.l3; });
  return paths;
}

// The widths of layer t's radial MLP: its input (the radial basis, in a non-linear block with the
// source and target species embeddings), the hidden layers, the path weights.
std::vector<int64_t> radial_widths(const Shape& s, int t) {
  std::vector<int64_t> widths{s.nb + (s.nonlinear_block(t) ? 2 * s.C : 0)};
  widths.insert(widths.end(), s.radial.begin(), s.radial.end());
  widths.push_back(int64_t(tensor_product_paths(s, t).size()) * s.edge_C(t));
  return widths;
}

int64_t offset_of(int l) { return int64_t(l) * l; }  // components before degree l

torch::Tensor long_tensor(const std::vector<int64_t>& v) { return torch::tensor(v, torch::kInt64); }

// Registers a layer's tensor-product tables and returns the TorchScript that turns the senders'
// channel-mixed features `up` (N, A, Ce), the harmonics `sh` and the path weights `w` (E, paths x Ce)
// into the centres' messages, one block (n_out, 2l+1, message_C) per l <= max_ell in the list `out`,
// before their normalisation: the edges' couplings s (E, A, K) = harmonics x Wigner 3j of every path,
// then torch.ops.mlip.equivariant_message (mlip/ops/equivariant_message.h), then the linear map
// of the paths' outputs to one block per l3.
std::string message_source(detail::ModuleBuilder& b, const Shape& s, int t, const std::string& p) {
  const auto paths = tensor_product_paths(s, t);
  const auto in = s.edge_ls(t);
  const int64_t Ce = s.edge_C(t);
  std::vector<int64_t> block_offset{0};
  for (const int l : in) block_offset.push_back(block_offset.back() + 2 * l + 1);
  const int64_t A = block_offset.back();
  std::vector<int64_t> col_path, first_col(paths.size());
  for (std::size_t k = 0; k < paths.size(); ++k) {
    first_col[k] = int64_t(col_path.size());
    for (int m = 0; m < 2 * paths[k].l3 + 1; ++m) col_path.push_back(int64_t(k));
  }
  const int64_t K = int64_t(col_path.size());
  torch::Tensor G = torch::zeros({(s.Ls + 1) * (s.Ls + 1), A, K}, torch::kFloat64);
  for (std::size_t k = 0; k < paths.size(); ++k) {
    const auto& q = paths[k];
    const torch::Tensor w3j = o3::wigner_3j(q.l1, q.l2, q.l3) * std::sqrt(2.0 * q.l3 + 1);  // (d1, d2, d3)
    G.narrow(0, offset_of(q.l2), 2 * q.l2 + 1)
        .narrow(1, block_offset[q.block], 2 * q.l1 + 1)
        .narrow(2, first_col[k], 2 * q.l3 + 1)
        .copy_(w3j.permute({1, 0, 2}));
  }
  b.buffer(p + "tp", G.reshape({G.size(0), A * K}));
  b.index_buffer(p + "tp_paths", long_tensor(col_path));
  std::ostringstream src;
  src << "    cpl = torch.matmul(sh, self." << p << "tp).view(-1, " << A << ", " << K << ")\n"
      << "    msg = mlip_ops.equivariant_message(up, cpl, w.view(-1, " << paths.size() << ", " << Ce << "), self." << p
      << "tp_paths, center, neighbor, n_out)\n";
  // Linear from the paths' outputs to one block per l3 (e3nn: one weight matrix per path).
  src << "    out = []\n";
  int64_t offset = 0;
  for (int l3 = 0, k = 0; l3 <= s.Ls; ++l3) {
    int count = 0;
    const int k0 = k;
    while (k < int(paths.size()) && paths[k].l3 == l3) ++k, ++count;
    const int d3 = 2 * l3 + 1;
    const int64_t Co = s.message_C(t, l3);
    if (count == 0) {
      src << "    out.append(torch.zeros([n_out, " << d3 << ", " << Co << "], dtype=w.dtype, device=w.device))\n";
      continue;
    }
    src << "    out.append(torch.einsum('nbdu,buw->ndw', [msg.narrow(1, " << first_col[k0] << ", " << count * d3
        << ").reshape(n_out, " << count << ", " << d3 << ", " << Ce << "), self." << p << "linear_w.narrow(0, "
        << offset << ", " << count * Ce * Co << ").view(" << count << ", " << Ce << ", " << Co << ")]) * "
        << num(1.0 / std::sqrt(double(count * Ce))) << ")\n";
    offset += count * Ce * Co;
  }
  return src.str();
}

// The size of linear_w: one (Ce, message_C) matrix per path.
int64_t message_linear_size(const Shape& s, int t) {
  int64_t n = 0;
  for (const Path& q : tensor_product_paths(s, t)) n += s.edge_C(t) * s.message_C(t, q.l3);
  return n;
}

// The messages' normalisation: by avg_num_neighbors, or mace-torch's Density blocks' 1 + sum_j
// tanh(radial_ij . w / sqrt(nb))^2 (times the envelope where apply_cutoff is off); leaves `msg`.
std::string normalised_message_source(const Shape& s, int t, const std::string& p) {
  if (!s.density(t)) return "    msg = torch.cat(out, 1) / self.avg_num_neighbors\n";
  std::ostringstream src;
  src << "    dens = torch.tanh(torch.pow(torch.matmul(w_in, self." << p << "density_w) * "
      << num(1.0 / std::sqrt(double(s.nb))) << ", 2))" << (s.basis.apply_cutoff ? "" : " * env") << "\n"
      << "    dens = torch.zeros([n_out, 1], dtype=dens.dtype, device=dens.device).index_add(0, center, dens)\n"
      << "    msg = torch.cat(out, 1) / (dens + 1.0).unsqueeze(2)\n";
  return src.str();
}

// Per-l channel mixing of blocks (n, C, 2l+1) held in `var` (list by l) with one (C, C) matrix per
// block, e3nn Linear layout, into `out`.
std::string linear_blocks(const std::string& var, const std::string& out, const std::string& w, int nblocks,
                          int64_t C) {
  std::ostringstream src;
  src << "    " << out << " = []\n";
  for (int k = 0; k < nblocks; ++k)
    src << "    " << out << ".append(torch.matmul(" << var << "[" << k << "].transpose(1, 2), " << w << ".narrow(0, "
        << k * C * C << ", " << C * C << ").view(" << C << ", " << C << ")).transpose(1, 2) * "
        << num(1.0 / std::sqrt(double(C))) << ")\n";
  return src.str();
}

// Species-dependent channel mixing (e3nn FullyConnectedTensorProduct with the one-hot species):
// out_l = sum_{u,v} W_l[u, v, w] x_l[n, u, :] attrs[n, v] / sqrt(C N) for the listed blocks, each
// (n, C, 2l+1), or (n, 2l+1, C) with layout_dc.
std::string skip_blocks(const std::string& var, const std::string& out, const std::string& w,
                        const std::vector<int>& which, const std::string& attrs, const Shape& s,
                        bool layout_dc = false) {
  std::ostringstream src;
  src << "    " << out << " = []\n";
  const int64_t size = s.C * s.N * s.C;
  for (std::size_t k = 0; k < which.size(); ++k)
    src << "    " << out << ".append(torch.einsum(" << (layout_dc ? "'ndu,uvw,nv->ndw'" : "'nud,uvw,nv->nwd'") << ", [" << var << "[" << which[k] << "], " << w
        << ".narrow(0, " << int64_t(k) * size << ", " << size << ").view(" << s.C << ", " << s.N << ", " << s.C
        << "), " << attrs << "]) * " << num(1.0 / std::sqrt(double(s.C * s.N))) << ")\n";
  return src.str();
}

// The symmetric contraction of `x` (n, (max_ell+1)^2, C) for output degrees out_ls: registers its
// tables and parameters; the TorchScript leaves a list of (n, C, 2L+1) blocks in `prod`.
std::string contraction_source(detail::ModuleBuilder& b, const Shape& s, int t, const std::string& p) {
  std::vector<o3::Irrep> coupling;
  for (int l = 0; l <= s.Ls; ++l) coupling.push_back(o3::natural(l));
  // Monomials of x: sorted index tuples per order nu; entries (monomial, weight row, output column).
  std::vector<std::map<std::vector<int64_t>, int64_t>> monomials(s.corr + 1);
  std::map<std::tuple<int, int64_t, int64_t, int64_t>, double> entries;  // (nu, local monomial, row, col)
  std::vector<std::string> weights;
  int64_t rows = 0, col0 = 0;
  const auto outs = s.out_ls(t);
  for (const int L : outs) {
    for (int nu = s.corr; nu >= 1; --nu) {
      const torch::Tensor U = o3::coupling_basis(coupling, o3::natural(L), nu).contiguous();
      const int64_t P = U.size(-1);
      if (U.abs().max().item<double>() == 0.0) continue;  // mace-torch keeps zeros there
      const std::string name = p + "sc" + std::to_string(L) + "_w" + std::to_string(nu);
      b.normal(name, {s.N, P, s.C}, 1.0 / double(P), SpeciesAxes::species);
      weights.push_back(name);
      const torch::Tensor flat = U.reshape({-1});
      const double* u = flat.data_ptr<double>();
      const int64_t D = (s.Ls + 1) * (s.Ls + 1);
      for (int64_t idx = 0; idx < flat.numel(); ++idx) {
        if (u[idx] == 0.0) continue;
        int64_t rest = idx;
        const int64_t k = rest % P;
        rest /= P;
        std::vector<int64_t> key(nu);
        for (int j = nu - 1; j >= 0; --j) key[j] = rest % D, rest /= D;
        const int64_t m = rest;
        std::sort(key.begin(), key.end());
        const auto it = monomials[nu].emplace(key, int64_t(monomials[nu].size())).first;
        entries[{nu, it->second, rows + k, col0 + m}] += u[idx];
      }
      rows += P;
    }
    col0 += 2 * L + 1;
  }
  // The monomials, all orders: their components (index D: a factor 1).
  const int64_t D = (s.Ls + 1) * (s.Ls + 1);
  std::vector<int64_t> mono_offset(s.corr + 2, 0);
  for (int nu = 1; nu <= s.corr; ++nu) mono_offset[nu + 1] = mono_offset[nu] + int64_t(monomials[nu].size());
  const int64_t Q = mono_offset[s.corr + 1];
  std::vector<int64_t> mono(3 * Q, D);
  for (int nu = 1; nu <= s.corr; ++nu)
    for (const auto& [key, q] : monomials[nu])
      for (int j = 0; j < nu; ++j) mono[3 * (mono_offset[nu] + q) + j] = key[j];
  b.index_buffer(p + "sc_mono", long_tensor(mono).view({Q, 3}));
  // Per species, the weights folded into the coefficients once per call: z[s, q, m, c] = sum over
  // entries (q, k, m) of U W[s, k, c]; then torch.ops.mlip.symmetric_contraction
  // (mlip/ops/symmetric_contraction.h) sums z[s_n, q, m, :] x monomial q of node n.
  std::vector<int64_t> e_row, e_qm;
  std::vector<double> e_val;
  for (const auto& [key, v] : entries) {
    if (std::abs(v) < 1e-12) continue;  // cancelled by the symmetry of the product
    const auto& [nu, q, row, col] = key;
    e_row.push_back(row), e_qm.push_back((mono_offset[nu] + q) * col0 + col), e_val.push_back(v);
  }
  b.index_buffer(p + "sc_rows", long_tensor(e_row));
  b.index_buffer(p + "sc_qm", long_tensor(e_qm));
  b.buffer(p + "sc_val", torch::tensor(e_val, torch::kFloat64).view({-1, 1}));
  std::ostringstream src;
  src << "    wall = torch.cat([";
  for (std::size_t k = 0; k < weights.size(); ++k) src << (k ? ", " : "") << "self." << weights[k];
  src << "], 1)\n"
      << "    z = torch.zeros([" << s.N << ", " << Q * col0 << ", " << s.C << "], dtype=x.dtype, device=x.device)"
      << ".index_add(1, self." << p << "sc_qm, wall.index_select(1, self." << p << "sc_rows) * self." << p << "sc_val)\n"
      << "    b = mlip_ops.symmetric_contraction(x, z.view(" << s.N << ", " << Q << ", " << col0 << ", " << s.C
      << "), self." << p << "sc_mono, torch.argmax(attrs_out, 1))\n"
      << "    prod = []\n";
  int64_t c = 0;
  for (const int L : outs) {
    src << "    prod.append(b.narrow(1, " << c << ", " << 2 * L + 1 << ").transpose(1, 2))\n";
    c += 2 * L + 1;
  }
  return src.str();
}

// edge_irreps ("" or mace-torch's "Cx0e+Cx1o+...": the same channels for each l from 0, natural
// parities) and use_edge_irreps_first.
void read_edge_irreps(detail::HyperParameters& hp, Shape& s) {
  const auto text = hp.get<std::string>("edge_irreps", "");
  s.edge_first = hp.get<bool>("use_edge_irreps_first", false);
  if (text.empty()) {
    if (s.edge_first) hp.fail("use_edge_irreps_first", "needs edge_irreps");
    return;
  }
  std::string rest = text;
  rest.erase(std::remove(rest.begin(), rest.end(), ' '), rest.end());
  for (int l = 0; !rest.empty(); ++l) {
    const auto plus = rest.find('+');
    const std::string term = rest.substr(0, plus);
    rest = plus == std::string::npos ? "" : rest.substr(plus + 1);
    const std::string irrep = "x" + std::to_string(l) + (l % 2 == 0 ? "e" : "o");
    const auto x = term.find('x');
    if (x == std::string::npos || x == 0 || term.substr(x) != irrep ||
        term.substr(0, x).find_first_not_of("0123456789") != std::string::npos)
      hp.fail("edge_irreps", "must be channels of l = 0, 1, ... with natural parity, e.g. \"64x0e+64x1o\" (got \"" +
                                 text + "\")");
    const int64_t c = std::stoll(term.substr(0, x));
    if (c < 1 || (l > 0 && c != s.Ce)) hp.fail("edge_irreps", "must have the same channels (>= 1) for each l");
    s.Ce = c, s.Le = l;
  }
}

// The hyperparameters, checked, and those the model is built with (`resolved`, `avg`).
// heads (mace-torch's multi-head models: one readout, E0 and scale/shift per head, the rest
// shared) and head, the one forward() evaluates (default the first).
void read_heads(detail::HyperParameters& hp, Shape& s) {
  s.heads = hp.get<std::vector<std::string>>("heads", {});
  const auto head = hp.get<std::string>("head", "");
  for (std::size_t k = 0; k < s.heads.size(); ++k) {
    if (s.heads[k].empty()) hp.fail("heads", "has an empty name");
    if (std::count(s.heads.begin(), s.heads.end(), s.heads[k]) > 1) hp.fail("heads", "lists '" + s.heads[k] + "' twice");
  }
  if (head.empty()) return;
  const auto it = std::find(s.heads.begin(), s.heads.end(), head);
  if (it == s.heads.end()) hp.fail("head", "'" + head + "' is not one of the model's heads (hyperparameter 'heads')");
  s.head = int64_t(it - s.heads.begin());
}

Shape read_shape(const ModelSpec& spec, nlohmann::json& resolved_out, double& avg_out) {
  detail::HyperParameters hp(spec.hyperparameters, "mace");
  Shape s;
  s.C = hp.get<int64_t>("num_channels", 128);
  s.Lh = hp.get<int>("max_L", 1);
  s.Ls = hp.get<int>("max_ell", 3);
  s.corr = hp.get<int>("correlation", 3);
  s.layers = hp.get<int>("num_interactions", 2);
  s.nb = hp.get<int>("num_radial_basis", 8);
  s.p = hp.get<int>("num_cutoff_basis", 5);
  s.radial = hp.get<std::vector<int64_t>>("radial_MLP", {64, 64, 64});
  const auto mlp_irreps = hp.get<std::string>("MLP_irreps", "16x0e");
  const double avg = hp.get<double>("avg_num_neighbors", 0.0);
  const auto first = hp.get<std::string>("interaction_first", "RealAgnosticInteractionBlock");
  const auto rest = hp.get<std::string>("interaction", "RealAgnosticResidualInteractionBlock");
  const std::vector<std::string> firsts{"RealAgnosticInteractionBlock", "RealAgnosticResidualInteractionBlock",
                                        "RealAgnosticDensityInteractionBlock",
                                        "RealAgnosticDensityResidualInteractionBlock",
                                        "RealAgnosticResidualNonLinearInteractionBlock"};
  if (std::find(firsts.begin(), firsts.end(), first) == firsts.end())
    hp.fail("interaction_first",
            "must be one of RealAgnostic{,Residual,Density,DensityResidual,ResidualNonLinear}InteractionBlock");
  if (rest != firsts[1] && rest != firsts[3] && rest != firsts[4])
    hp.fail("interaction", "must be RealAgnostic{Residual,DensityResidual,ResidualNonLinear}InteractionBlock");
  s.residual_first = first.find("Residual") != std::string::npos;
  s.density_first = first.find("Density") != std::string::npos;
  s.density_rest = rest.find("Density") != std::string::npos;
  s.nonlinear_first = first == firsts[4];
  s.nonlinear_rest = rest == firsts[4];
  read_edge_irreps(hp, s);
  s.basis = detail::read_mace_radial(hp, s.nb, s.p);
  read_heads(hp, s);
  nlohmann::json resolved = hp.finish();
  if (s.heads.empty())   // a single-head model's hyperparameters as before heads existed
    for (const char* key : {"heads", "head"}) resolved.erase(key);
  else
    resolved["head"] = s.heads[s.head];
  resolved_out = resolved;
  if (s.C < 1) hp.fail("num_channels", "must be >= 1");
  if (s.Lh < 0 || s.Lh > 3) hp.fail("max_L", "must be 0, 1, 2 or 3");
  if (s.Ls < 1 || s.Ls > 6) hp.fail("max_ell", "must be between 1 and 6");
  if (s.Lh > s.Ls) hp.fail("max_L", "must not exceed max_ell");
  if (s.Le > s.Ls) hp.fail("edge_irreps", "must not go beyond max_ell");
  if (s.corr < 1 || s.corr > 3) hp.fail("correlation", "must be 1, 2 or 3");
  if (s.layers < 1) hp.fail("num_interactions", "must be >= 1");
  if (s.nb < 1) hp.fail("num_radial_basis", "must be >= 1");
  if (s.p < 1) hp.fail("num_cutoff_basis", "must be >= 1");
  for (const auto w : s.radial)
    if (w < 1) hp.fail("radial_MLP", "widths must be >= 1");
  {
    const auto x = mlp_irreps.find("x0e");
    if (x == std::string::npos || x == 0 || x + 3 != mlp_irreps.size() ||
        mlp_irreps.find_first_not_of("0123456789") != x)
      hp.fail("MLP_irreps", "must be scalars, e.g. \"16x0e\" (got \"" + mlp_irreps + "\")");
    s.mlp = std::stoi(mlp_irreps.substr(0, x));
    if (s.mlp < 1) hp.fail("MLP_irreps", "must have at least one channel");
  }
  if (avg < 0) hp.fail("avg_num_neighbors", "must be positive (or 0: from data)");
  s.N = int64_t(spec.species.size());
  avg_out = avg;
  return s;
}

// mp_edges and mp_embed.
std::string edges_source(detail::ModuleBuilder& b, const Shape& s, double cutoff) {
  const auto [sh_terms, sh_coefficients] = o3::spherical_harmonics_terms(s.Ls);
  b.index_buffer("sh_terms", sh_terms);
  b.buffer("sh_coefficients", sh_coefficients, SpeciesAxes::from_data);
  std::ostringstream src;
  // mp_edges: the radial terms (mace_radial.h) and harmonics (E, (max_ell+1)^2) of the vector
  // from the neighbour to the centre (mace-torch's sender -> receiver).
  src << "def mp_edges(self, edge_vectors: Tensor) -> Tuple[Tensor, Tensor]:\n"
      << "    r = torch.sqrt((edge_vectors * edge_vectors).sum(1)).unsqueeze(1)\n"
      << detail::mace_edges_source(s.basis, cutoff)
      << "    u = edge_vectors / r\n"
      << "    sh = mlip_ops.vector_polynomials(-u, self.sh_terms, self.sh_coefficients, " << (s.Ls + 1) * (s.Ls + 1)
      << ")\n"
      << "    return radial, sh\n";
  // mp_embed: (e, h, attrs): accumulated readout energies, features (scalars first, the rest
  // zero: the width stays that of the widest layer), one-hot species.
  src << "def mp_embed(self, species: Tensor) -> Tuple[Tensor, Tensor, Tensor]:\n"
      << "    attrs = torch.one_hot(species, " << s.N << ").to(self.embedding_w.dtype)\n"
      << "    h = torch.matmul(attrs, self.embedding_w.view(" << s.N << ", " << s.C << ")) * "
      << num(1.0 / std::sqrt(double(s.N))) << "\n"
      << "    h = torch.cat([h, torch.zeros([species.size(0), " << s.hidden_width() - s.C
      << "], dtype=h.dtype, device=h.device)], 1)\n"
      << "    return torch.zeros([species.size(0), " << s.H() << "], dtype=h.dtype, device=h.device), h, attrs\n";
  return src.str();
}

// `ro` (n_out, heads): the readout's energies of the scalars `h0`: linear, or at the last layer one
// hidden layer of MLP_irreps gated units; per head the same maps with the head's weights (the
// hidden units of the other heads are not its: mace-torch's mask_head).
std::string readout_energy_source(const Shape& s, int t, const std::string& p) {
  const std::string C = std::to_string(s.C), M = std::to_string(s.mlp), H = std::to_string(s.H());
  const std::string inv_c = num(1.0 / std::sqrt(double(s.C))), inv_m = num(1.0 / std::sqrt(double(s.mlp)));
  std::ostringstream src;
  if (t < s.layers - 1 || s.layers == 1) {
    const std::string w = s.heads.empty() ? "self." + p + "ro_w.view(" + C + ", 1)" : "self." + p + "ro_w.view(" + H + ", " + C + ").t()";
    src << "    ro = torch.matmul(h0, " << w << ") * " << inv_c << "\n";
  } else if (s.heads.empty()) {
    src << "    ro = torch.matmul("
        << detail::mace_gate(s.basis, "torch.matmul(h0, self." + p + "ro1_w.view(" + C + ", " + M + ")) * " + inv_c)
        << ", self." << p << "ro2_w.view(" << M << ", 1)) * " << inv_m << "\n";
  } else {
    const std::string w1 = "self." + p + "ro1_w.view(" + H + ", " + C + ", " + M + ").permute(1, 0, 2).reshape(" + C + ", " +
                           std::to_string(s.H() * s.mlp) + ")";
    src << "    hid = " << detail::mace_gate(s.basis, "torch.matmul(h0, " + w1 + ") * " + inv_c) << "\n"
        << "    ro = (hid.view(n_out, " << H << ", " << M << ") * self." << p << "ro2_w.view(1, " << H << ", " << M
        << ")).sum(2) * " << inv_m << "\n";
  }
  return src.str();
}

// The layer's new features `h2` (the hidden width, zero beyond the last layer's scalars) from the
// blocks `hb`, and its readout's energies added to `e`.
std::string readout_source(const Shape& s, int t, const std::string& p) {
  const auto outs = s.out_ls(t);
  std::ostringstream src;
  src << "    flat = []\n";
  for (std::size_t k = 0; k < outs.size(); ++k)
    src << "    flat.append(hb[" << k << "].reshape(n_out, " << s.C * (2 * outs[k] + 1) << "))\n";
  const int64_t width = s.C * (outs.back() + 1) * (outs.back() + 1);
  if (width < s.hidden_width())
    src << "    flat.append(torch.zeros([n_out, " << s.hidden_width() - width << "], dtype=msg.dtype, device=msg.device))\n";
  src << "    h2 = torch.cat(flat, 1)\n"
      << "    h0 = hb[0].reshape(n_out, " << s.C << ")\n";
  src << readout_energy_source(s, t, p) << "    return e.narrow(0, 0, n_out) + ro, h2, attrs_out\n";
  return src.str();
}

bool contains(const std::vector<int>& ls, int l) { return std::find(ls.begin(), ls.end(), l) != ls.end(); }

// mace-torch's RadialMLP (Linear with bias, LayerNorm, SiLU, ..., Linear with bias; torch's layouts)
// of `x` into `y`, its parameters registered under `p`.
std::string radial_mlp_source(detail::ModuleBuilder& b, const std::string& p, const std::vector<int64_t>& widths,
                              const std::string& x, const std::string& y) {
  std::ostringstream src;
  src << "    " << y << " = " << x << "\n";
  for (std::size_t j = 0; j + 1 < widths.size(); ++j) {
    const std::string q = "self." + p + std::to_string(j);
    b.normal(p + std::to_string(j) + "_w", {widths[j + 1], widths[j]}, 1.0 / std::sqrt(double(widths[j])));
    b.constant(p + std::to_string(j) + "_b", {widths[j + 1]}, 0.0);
    src << "    " << y << " = torch.matmul(" << y << ", " << q << "_w.t()) + " << q << "_b\n";
    if (j + 2 == widths.size()) break;
    b.constant(p + std::to_string(j) + "_ln_w", {widths[j + 1]}, 1.0);
    b.constant(p + std::to_string(j) + "_ln_b", {widths[j + 1]}, 0.0);
    src << "    " << y << " = mlip_ops.scaled_silu(torch.layer_norm(" << y << ", [" << widths[j + 1] << "], " << q
        << "_ln_w, " << q << "_ln_b, 1e-05, False), 1.0)\n";
  }
  return src.str();
}

// The parameters of layer t, in e3nn's layouts, but for the radial nets of a non-linear block
// (radial_mlp_source's) and the ones message_source and contraction_source register. Returns the
// blocks of the input the skip connection maps (indices into in_ls) where it is residual.
std::vector<int> layer_parameters(detail::ModuleBuilder& b, const Shape& s, int t, const std::string& p) {
  const auto in = s.in_ls(t), outs = s.out_ls(t), edge = s.edge_ls(t);
  const int64_t Ce = s.edge_C(t);
  int64_t up = 0;
  for (const int l : edge) up += contains(in, l) ? s.C * Ce : 0;
  b.normal(p + "up_w", {up}, 1.0);
  if (s.nonlinear_block(t)) {
    for (const char* w : {"source_w", "target_w"}) {
      b.normal(p + w, {s.N * s.C}, 0.001);
      b.species_layout(p + w, {s.N, s.C}, 0, /*per_sqrt_species=*/true);
    }
    int64_t res = 0;
    for (const int l : edge) res += Ce * s.message_C(t, l);
    b.normal(p + "res_w", {res}, 1.0);
    b.normal(p + "linear2_w", {int64_t(s.Ls + 1) * s.C * s.C}, 1.0);
    b.constant(p + "alpha", {}, 20.0);
    b.constant(p + "beta", {}, 0.0);
  } else {
    const auto widths = radial_widths(s, t);
    for (std::size_t j = 0; j + 1 < widths.size(); ++j)
      b.normal(p + "mlp" + std::to_string(j) + "_w", {widths[j], widths[j + 1]}, 1.0);
  }
  b.normal(p + "linear_w", {message_linear_size(s, t)}, 1.0);
  if (s.density(t)) b.normal(p + "density_w", {s.nb, 1}, 1.0);
  std::vector<int> skip_in;
  if (!s.residual(t)) {
    b.normal(p + "skip_w", {int64_t(s.Ls + 1) * s.C * s.N * s.C}, 1.0);
    b.species_layout(p + "skip_w", {int64_t(s.Ls + 1), s.C, s.N, s.C}, 2, /*per_sqrt_species=*/true);
  } else {
    for (std::size_t k = 0; k < in.size(); ++k)
      if (contains(outs, in[k])) skip_in.push_back(int(k));
    // the non-linear block's skip connection is a Linear, the others' are species-dependent
    b.normal(p + "skip_w", {int64_t(skip_in.size()) * s.C * (s.nonlinear_block(t) ? 1 : s.N) * s.C}, 1.0);
    if (!s.nonlinear_block(t))
      b.species_layout(p + "skip_w", {int64_t(skip_in.size()), s.C, s.N, s.C}, 2, /*per_sqrt_species=*/true);
  }
  b.normal(p + "prod_w", {int64_t(outs.size()) * s.C * s.C}, 1.0);
  // readouts: a leading axis of heads in a multi-head model
  auto readout = [&](const std::string& name, int64_t size) {
    if (s.heads.empty()) return b.normal(name, {size}, 1.0);
    b.normal(name, {s.H(), size}, 1.0);
    b.head_axis(name, 0);
  };
  if (t == s.layers - 1 && s.layers > 1) {
    readout(p + "ro1_w", s.C * s.mlp);
    readout(p + "ro2_w", s.mlp);
  } else {
    readout(p + "ro_w", s.C);
  }
  return skip_in;
}

// mp_node_t: linear_up of every node's features into the edge irreps, (n, sum of 2l+1, Ce): the
// layout of the message operator.
std::string node_source(const Shape& s, int t, const std::string& p) {
  const auto in = s.in_ls(t);
  const int64_t Ce = s.edge_C(t);
  std::ostringstream src;
  src << "def mp_node_" << t << "(self, e: Tensor, h: Tensor, attrs: Tensor) -> Tensor:\n"
      << "    up = []\n";
  int64_t offset = 0;
  for (const int l : s.edge_ls(t)) {
    if (!contains(in, l)) {
      src << "    up.append(torch.zeros([h.size(0), " << 2 * l + 1 << ", " << Ce << "], dtype=h.dtype, device=h.device))\n";
      continue;
    }
    src << "    up.append(torch.matmul(h.narrow(1, " << s.C * offset_of(l) << ", " << s.C * (2 * l + 1)
        << ").reshape(-1, " << s.C << ", " << 2 * l + 1 << ").transpose(1, 2), self." << p << "up_w.narrow(0, "
        << offset << ", " << s.C * Ce << ").view(" << s.C << ", " << Ce << ")) * " << num(1.0 / std::sqrt(double(s.C)))
        << ")\n";
    offset += s.C * Ce;
  }
  src << "    return torch.cat(up, 1)\n";
  return src.str();
}

// The per-edge path weights `w` from `w_in`: e3nn's FullyConnectedNet with normalised SiLU; in a
// non-linear block, mace-torch's RadialMLP of the radial terms and the source and target atoms'
// species embeddings (`w_ext`, which its density net reads too).
std::string path_weights_source(detail::ModuleBuilder& b, const Shape& s, int t, const std::string& p) {
  std::ostringstream src;
  if (s.nonlinear_block(t)) {
    const std::string scale = num(1.0 / std::sqrt(double(s.N)));
    src << "    src_emb = torch.matmul(attrs, self." << p << "source_w.view(" << s.N << ", " << s.C << ")) * " << scale
        << "\n    tgt_emb = torch.matmul(attrs, self." << p << "target_w.view(" << s.N << ", " << s.C << ")) * " << scale
        << "\n    w_ext = torch.cat([w_in, src_emb.index_select(0, neighbor), tgt_emb.index_select(0, center)], 1)\n";
    src << radial_mlp_source(b, p + "mlp", radial_widths(s, t), "w_ext", "w");
  } else {
    const auto widths = radial_widths(s, t);
    src << "    w = w_in\n";
    for (std::size_t j = 0; j + 1 < widths.size(); ++j) {
      src << "    w = torch.matmul(w, self." << p << "mlp" << j << "_w * " << num(1.0 / std::sqrt(double(widths[j])))
          << ")\n";
      if (j + 2 < widths.size()) src << "    w = mlip_ops.scaled_silu(w, " << num(o3::kSiluNorm) << ")\n";
    }
  }
  if (!s.basis.apply_cutoff) src << "    w = w * env\n";
  return src.str();
}

// The non-linear residual block (mace-torch's RealAgnosticResidualNonLinearInteractionBlock) from
// the blocks `out`: divided by alpha + beta x its learnt density (tanh(RadialMLP(w_ext))^2 summed
// per centre), plus linear_res of the centres' `up`, through the gate (SiLU of the scalars, the
// sigmoids of the gates times the l > 0 blocks, both normalised as e3nn's), linear_2; leaves `msg`.
std::string nonlinear_message_source(detail::ModuleBuilder& b, const Shape& s, int t, const std::string& p) {
  std::ostringstream src;
  src << radial_mlp_source(b, p + "density", {s.nb + 2 * s.C, 64, 1}, "w_ext", "dens")
      << "    dens = torch.tanh(torch.pow(dens, 2))" << (s.basis.apply_cutoff ? "" : " * env") << "\n"
      << "    dens = torch.zeros([n_out, 1], dtype=dens.dtype, device=dens.device).index_add(0, center, dens)\n"
      << "    norm = (dens * self." << p << "beta + self." << p << "alpha).unsqueeze(2)\n"
      << "    upc = up.narrow(0, 0, n_out)\n";
  const auto edge = s.edge_ls(t);
  const int64_t Ce = s.edge_C(t);
  int64_t offset = 0, a = 0;
  for (int l = 0; l <= s.Ls; ++l) {
    src << "    out[" << l << "] = out[" << l << "] / norm\n";
    if (!contains(edge, l)) continue;
    const int64_t Co = s.message_C(t, l);
    src << "    out[" << l << "] = out[" << l << "] + torch.matmul(upc.narrow(1, " << a << ", " << 2 * l + 1 << "), self."
        << p << "res_w.narrow(0, " << offset << ", " << Ce * Co << ").view(" << Ce << ", " << Co << ")) * "
        << num(1.0 / std::sqrt(double(Ce))) << "\n";
    offset += Ce * Co, a += 2 * l + 1;
  }
  const std::string sigmoid_norm = num(kSigmoidNorm);
  src << "    gates = torch.sigmoid(out[0].narrow(2, " << s.C << ", " << s.Ls * s.C << ")) * " << sigmoid_norm << "\n"
      << "    out[0] = torch.silu(out[0].narrow(2, 0, " << s.C << ")) * " << num(o3::kSiluNorm) << "\n";
  for (int l = 1; l <= s.Ls; ++l)
    src << "    out[" << l << "] = out[" << l << "] * gates.narrow(2, " << (l - 1) * s.C << ", " << s.C << ")\n";
  src << "    gated = []\n";
  for (int l = 0; l <= s.Ls; ++l)
    src << "    gated.append(torch.matmul(out[" << l << "], self." << p << "linear2_w.narrow(0, " << l * s.C * s.C
        << ", " << s.C * s.C << ").view(" << s.C << ", " << s.C << ")) * " << num(1.0 / std::sqrt(double(s.C))) << ")\n";
  src << "    msg = torch.cat(gated, 1)\n";
  return src.str();
}

// The skip connection of the centres' input blocks `skip_in` into `sc`: species-dependent, or a
// Linear in a non-linear block.
std::string skip_source(const Shape& s, int t, const std::string& p, const std::vector<int>& skip_in) {
  const auto in = s.in_ls(t);
  std::ostringstream src;
  src << "    hin = []\n";
  for (const int k : skip_in)
    src << "    hin.append(h.narrow(0, 0, n_out).narrow(1, " << s.C * offset_of(in[k]) << ", " << s.C * (2 * in[k] + 1)
        << ").reshape(n_out, " << s.C << ", " << 2 * in[k] + 1 << "))\n";
  std::vector<int> all(skip_in.size());
  for (std::size_t k = 0; k < all.size(); ++k) all[k] = int(k);
  if (s.nonlinear_block(t))
    src << linear_blocks("hin", "sc", "self." + p + "skip_w", int(skip_in.size()), s.C);
  else
    src << skip_blocks("hin", "sc", "self." + p + "skip_w", all, "attrs_out", s);
  return src.str();
}

// Layer t: its parameters and tables, and mp_node_t and mp_layer_t.
std::string layer_source(detail::ModuleBuilder& b, const Shape& s, int t, double cutoff) {
  std::ostringstream src;
  const std::string p = "l" + std::to_string(t) + "_";
  const auto outs = s.out_ls(t);
  const std::vector<int> skip_in = layer_parameters(b, s, t, p);
  src << node_source(s, t, p);
  src << "def mp_layer_" << t << "(self, e: Tensor, h: Tensor, attrs: Tensor, up: Tensor, center: Tensor, "
      << "neighbor: Tensor, radial: Tensor, sh: Tensor, n_out: int) -> Tuple[Tensor, Tensor, Tensor]:\n"
      << detail::mace_layer_radial_source(s.basis, cutoff) << path_weights_source(b, s, t, p)
      << "    attrs_out = attrs.narrow(0, 0, n_out)\n"
      << message_source(b, s, t, p)
      << (s.nonlinear_block(t) ? nonlinear_message_source(b, s, t, p) : normalised_message_source(s, t, p));
  if (!s.residual(t)) {
    std::vector<int> all;
    src << "    mb = []\n";
    for (int l = 0; l <= s.Ls; ++l) {
      src << "    mb.append(msg.narrow(1, " << offset_of(l) << ", " << 2 * l + 1 << "))\n";
      all.push_back(l);
    }
    src << skip_blocks("mb", "mb2", "self." + p + "skip_w", all, "attrs_out", s, true)
        << "    x = torch.cat(mb2, 1)\n";
  } else {
    src << "    x = msg\n";
  }
  src << contraction_source(b, s, t, p)
      << linear_blocks("prod", "hb", "self." + p + "prod_w", int(outs.size()), s.C);
  if (s.residual(t)) {
    src << skip_source(s, t, p, skip_in);
    for (std::size_t k = 0; k < skip_in.size(); ++k) src << "    hb[" << k << "] = hb[" << k << "] + sc[" << k << "]\n";
  }
  return src.str() + readout_source(s, t, p);
}

// forward: the parts composed; the last layer on the centres' edges only. `heads`: forward_heads,
// the energies of each node's head `head` (n_nodes,), which the trainer calls for a multi-head model
// (and the pair style for a head it chose). `grouped`: forward_grouped, the same with static shapes
// (mlip/model/grouped_graph.h, message passing: the edges into centres first, edge_groups[0] of
// them, which the last layer narrows to); both: forward_grouped_heads.
std::string forward_source(const Shape& s, bool heads, bool grouped = false) {
  std::ostringstream src;
  src << "def forward" << (grouped ? "_grouped" : "") << (heads ? "_heads" : "")
      << "(self, species: Tensor, edge_index: Tensor, edge_vectors: Tensor, n_centers: int"
      << (grouped ? ", center_groups: List[int], edge_groups: List[int]" : "") << (heads ? ", head: Tensor" : "")
      << ") -> Tensor:\n";
  src
      << "    center = edge_index[0]\n"
      << "    neighbor = edge_index[1]\n"
      << "    n_out = species.size(0)\n"
      << "    radial, sh = self.mp_edges(edge_vectors)\n"
      << "    e, h, attrs = self.mp_embed(species)\n";
  for (int t = 0; t < s.layers; ++t) {
    if (t == s.layers - 1) src << detail::centre_edges_source(grouped, {"center", "neighbor", "radial", "sh"});
    src << "    e, h, attrs = self.mp_layer_" << t << "(e, h, attrs, self.mp_node_" << t
        << "(e, h, attrs), center, neighbor, radial, sh, n_out)\n";
  }
  src << "    return self.mp_readout" << (heads ? "_heads" : "") << (grouped ? "_all_edges" : "")
      << "(species, e, edge_index, edge_vectors, n_centers" << (heads ? ", head" : "") << ")\n";
  return src.str();
}

// mp_readout: per-atom energies from the readouts' sums `e` (n, heads), ZBL and the repulsion
// prior; a multi-head model's through mp_readout_heads (each centre's head), forward()'s head.
// mp_readout_all_edges (and _heads): the same with the prior on every edge (static shapes, for
// forward_grouped: zero beyond its reach) instead of the edges within it, picked on the device.
std::string energy_source(detail::ModuleBuilder& b, const Shape& s, const ModelSpec& spec) {
  const std::string signature =
      "(self, species: Tensor, e: Tensor, edge_index: Tensor, edge_vectors: Tensor, n_centers: int";
  const std::string near = detail::add_repulsion(b, spec), zbl_lines = detail::mace_zbl_source(b, s.basis, spec.species);
  const std::string zbl = s.basis.zbl ? " + e_zbl" : "", rep = spec.repulsion == "none" ? "" : " + e_rep";
  std::ostringstream src;
  for (const std::string suffix : {"", "_all_edges"}) {
    const std::string lines = (near.empty() ? "" : suffix.empty() ? near : detail::repulsion_source(false)) + zbl_lines;
    if (s.heads.empty()) {
      src << "def mp_readout" << suffix << signature << ") -> Tensor:\n"
          << "    cs = species[:n_centers]\n"
          << lines << "    return (e.narrow(0, 0, n_centers).squeeze(1)" << zbl << ") * self.energy_scale[cs] + "
          << "self.energy_shift[cs]" << rep << "\n";
      continue;
    }
    src << "def mp_readout" << suffix << signature << ") -> Tensor:\n"
        << "    head = torch.full_like(species.narrow(0, 0, n_centers), " << s.head << ")\n"
        << "    return self.mp_readout_heads" << suffix << "(species, e, edge_index, edge_vectors, n_centers, head)\n"
        << "def mp_readout_heads" << suffix << signature << ", head: Tensor) -> Tensor:\n"
        << "    cs = species[:n_centers]\n"
        << "    hc = head[:n_centers]\n"
        << lines << "    eh = e.narrow(0, 0, n_centers).gather(1, hc.unsqueeze(1)).squeeze(1)\n"
        << "    return (eh" << zbl << ") * self.energy_scale[cs, hc] + self.energy_shift[cs, hc]" << rep << "\n";
  }
  return src.str();
}

}  // namespace

BuiltModel build_mace(const ModelSpec& spec) {
  nlohmann::json resolved;
  double avg = 0;
  const Shape s = read_shape(spec, resolved, avg);

  detail::ModuleBuilder b("MACE", torch_dtype(spec), spec.seed);
  b.normal("embedding_w", {s.N * s.C}, 1.0);
  b.species_layout("embedding_w", {s.N, s.C}, 0, /*per_sqrt_species=*/true);
  b.buffer("avg_num_neighbors", torch::full({1}, avg > 0 ? avg : 1.0, torch::kFloat64));
  detail::add_energy_buffers(b, s.N, int64_t(s.heads.size()));
  b.float_attribute("cutoff", spec.cutoff);

  std::ostringstream src;
  src << edges_source(b, s, spec.cutoff);
  detail::mace_radial_buffers(b, s.basis, spec.species, spec.cutoff);
  for (int t = 0; t < s.layers; ++t) src << layer_source(b, s, t, spec.cutoff);
  src << energy_source(b, s, spec) << forward_source(s, false) << forward_source(s, false, /*grouped=*/true);
  if (!s.heads.empty()) src << forward_source(s, true) << forward_source(s, true, /*grouped=*/true);
  // Everything but the layers' readouts (ro_w; ro1_w and ro2_w at the last) is the descriptor
  // (training.freeze).
  b.descriptor_all_but([](const std::string& name) {
    const auto ends = [&](const std::string& suffix) {
      return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    return ends("_ro_w") || ends("_ro1_w") || ends("_ro2_w");
  });
  return b.finish(src.str(), spec, "mace", s.layers, resolved);
}

void fit_mace_statistics(BuiltModel& model, const std::vector<const Frame*>& frames) {
  if (model.metadata.hyperparameters.at("avg_num_neighbors").get<double>() != 0.0) return;
  double edges = 0, centers = 0;
  for (const Frame* f : frames) {
    edges += static_cast<double>(f->num_edges());
    centers += static_cast<double>(f->structure.size());
  }
  torch::NoGradGuard no_grad;  // setting a buffer, not evaluating
  if (centers > 0 && edges > 0) model.module.attr("avg_num_neighbors").toTensor().fill_(edges / centers);
}

}  // namespace mlip
