// PaiNN: polarizable atom interaction neural network (Schütt, Unke, Gastegger, ICML 2021).
//
// Why PaiNN for mlip's equivariant model: it carries scalar and vector (l = 1) features, which
// gives it angular resolution that invariant message passing lacks, at a cost close to an
// invariant network: no Clebsch-Gordan products or spherical harmonics beyond l = 1, only dense
// layers and element-wise products, so it maps onto the aten builtins TorchScript offers and runs
// well on CPUs. NequIP/MACE-class models reach higher accuracy per parameter with l >= 2 tensor
// products, at several times the cost per atom.
//
// Per interaction layer (features s_i (F), v_i (3 x F), v = 0 initially):
//   message:  x_ij = phi(s_j) * W(rbf(r_ij)) fc(r_ij), split into (x_s, x_vv, x_vs)
//             s_i += sum_j x_s / N,   v_i += sum_j (x_vv v_j + x_vs r_ij/|r_ij|) / N
//   update:   a = MLP([s_i, |V v_i|]) split into (a_vv, a_sv, a_ss)
//             v_i += a_vv (U v_i),   s_i += a_sv <U v_i, V v_i> + a_ss
// Energy: E_i = scale_{s_i} MLP(s_i) + shift_{s_i}. rbf_n(r) = sin(n pi r / rc) / r and the cosine
// envelope fc vanish at the cutoff, so every message fades out smoothly there.
//
// Lean evaluation: the filter W(rbf) fc = (rbf W + b) fc is one product [rbf fc, fc] [W; b] of
// the edges' radial terms ((edges x radial_basis + 1), computed once per graph or chunk) with the
// layer's weights, and the message sums are one operator (torch.ops.mlip.vector_message,
// mlip/ops/vector_message.h) that makes one pass over the edges each way and keeps only its inputs:
// per layer and edge the autograd graph holds the filter (3F values), not the gathered features
// and messages (about 6 x 3F values composed of aten operations).
//
// N (neighbor_norm) keeps the sums of ~50 neighbours (water at 5 A) from growing the features
// layer after layer, and a model with several layers would start training from forces far
// larger than the data's.
//
// Hyperparameters (defaults): features (64), layers (2), radial_basis (16), neighbor_norm (0: the
// mean neighbour count of the training data; 1 for a model built without data).
#include <sstream>

#include "builder.h"

namespace mlip {

BuiltModel build_painn(const ModelSpec& spec) {
  detail::HyperParameters hp(spec.hyperparameters, "painn");
  const auto f = hp.get<int64_t>("features", 64);
  const auto layers = hp.get<int64_t>("layers", 2);
  const auto nrbf = hp.get<int64_t>("radial_basis", 16);
  const auto neighbor_norm = hp.get<double>("neighbor_norm", 0.0);
  const nlohmann::json resolved = hp.finish();
  if (f < 2) hp.fail("features", "must be >= 2");
  if (layers < 1) hp.fail("layers", "must be >= 1");
  if (nrbf < 1) hp.fail("radial_basis", "must be >= 1");
  if (neighbor_norm < 0.0) hp.fail("neighbor_norm", "must be positive (or 0: from data)");

  const int64_t ns = static_cast<int64_t>(spec.species.size());
  detail::ModuleBuilder b("PaiNN", torch_dtype(spec), spec.seed);
  // Everything but the readout (out1, out2) is the descriptor (training.freeze).
  auto linear = [&](const std::string& name, int64_t in, int64_t out) {
    b.normal(name + "_w", {in, out}, 1.0 / std::sqrt(double(in)));
    b.constant(name + "_b", {out}, 0.0);
    if (name.rfind("out", 0) != 0) {
      b.descriptor(name + "_w");
      b.descriptor(name + "_b");
    }
  };
  b.normal("embedding", {ns, f}, 1.0, SpeciesAxes::species);
  b.descriptor("embedding");
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "l" + std::to_string(l) + "_";
    linear(p + "phi1", f, f);
    linear(p + "phi2", f, 3 * f);
    linear(p + "filter", nrbf, 3 * f);
    b.normal(p + "U", {f, f}, 1.0 / std::sqrt(double(f)));
    b.normal(p + "V", {f, f}, 1.0 / std::sqrt(double(f)));
    b.descriptor(p + "U");
    b.descriptor(p + "V");
    linear(p + "upd1", 2 * f, f);
    linear(p + "upd2", f, 3 * f);
  }
  linear("out1", f, f / 2);
  linear("out2", f / 2, 1);
  detail::add_energy_buffers(b, ns);
  b.buffer("inv_neighbor_norm", torch::full({1}, 1.0 / (neighbor_norm > 0 ? neighbor_norm : 1.0), torch::kFloat64));
  b.float_attribute("cutoff", spec.cutoff);

  // The model in parts (mlip/model/message_passing.h): mp_edges (radial terms of the edges), mp_embed
  // (features before the first layer), mp_layer_<k> (layer k: messages into, and updates of, the
  // nodes [0, n_out)), mp_readout (centre energies). forward composes them; LAMMPS's per-layer
  // ghost exchange calls them one by one, refreshing the ghosts' features between layers.
  const std::string opts = "dtype=edge_vectors.dtype, device=edge_vectors.device";
  const std::string vopts = "dtype=s.dtype, device=s.device";
  std::ostringstream src;
  // mp_edges: (radial, unit) with radial = [rbf fc, fc] (edges x (nrbf + 1)).
  src << "def mp_edges(self, edge_vectors: Tensor) -> Tuple[Tensor, Tensor]:\n"
      << "    r = torch.sqrt((edge_vectors * edge_vectors).sum(1)).unsqueeze(1)\n"
      << "    k = torch.arange(1, " << nrbf + 1 << ", " << opts << ") * (3.141592653589793 / self.cutoff)\n"
      << "    fc = 0.5 * (torch.cos(r * (3.141592653589793 / self.cutoff)) + 1.0)\n"
      << "    return torch.cat([torch.sin(r * k) * (fc / r), fc], 1), edge_vectors / r\n"
      << "def mp_embed(self, species: Tensor) -> Tuple[Tensor, Tensor]:\n"
      << "    s = self.embedding[species]\n"
      << "    return s, torch.zeros([species.size(0), 3, " << f << "], " << vopts << ")\n";
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "self.l" + std::to_string(l) + "_";
    // mp_node_<l>: phi(s) of every node; mp_layer_<l>: the messages into, and updates of, nodes
    // [0, n_out). Split so that chunks of a graph share phi instead of each evaluating it on the
    // nodes it reaches.
    src << "def mp_node_" << l << "(self, s: Tensor, v: Tensor) -> Tensor:\n"
        << "    return torch.matmul(torch.silu(torch.matmul(s, " << p << "phi1_w) + " << p << "phi1_b), " << p
        << "phi2_w) + " << p << "phi2_b\n";
    src << "def mp_layer_" << l << "(self, s: Tensor, v: Tensor, phi: Tensor, center: Tensor, neighbor: Tensor, "
        << "radial: Tensor, unit: Tensor, n_out: int) -> Tuple[Tensor, Tensor]:\n"
        << "    w = torch.matmul(radial, torch.cat([" << p << "filter_w, " << p << "filter_b.unsqueeze(0)], 0))\n"
        << "    ds, dv = mlip_ops.vector_message(phi, w, v, unit, center, neighbor, n_out)\n"
        << "    s = s.narrow(0, 0, n_out) + ds * self.inv_neighbor_norm\n"
        << "    v = v.narrow(0, 0, n_out) + dv * self.inv_neighbor_norm\n"
        << "    uv = torch.matmul(v, " << p << "U)\n"
        << "    vv = torch.matmul(v, " << p << "V)\n"
        << "    vnorm = torch.sqrt((vv * vv).sum(1) + 1e-8)\n"
        << "    a = torch.matmul(torch.silu(torch.matmul(torch.cat([s, vnorm], 1), " << p << "upd1_w) + " << p
        << "upd1_b), " << p << "upd2_w) + " << p << "upd2_b\n"
        << "    avv, asv, ass = torch.split(a, " << f << ", 1)\n"
        << "    return s + asv * (uv * vv).sum(1) + ass, v + avv.unsqueeze(1) * uv\n";
  }
  // mp_readout: the ZBL prior on the edges within its reach (picked on the device); the grouped
  // forward's readout on every edge (static shapes: zero beyond the prior's reach).
  const std::string repulsion = detail::add_repulsion(b, spec);
  for (const bool all_edges : {false, true}) {
    src << "def mp_readout" << (all_edges ? "_all_edges" : "") << "(self, species: Tensor, s: Tensor, "
        << "edge_index: Tensor, edge_vectors: Tensor, n_centers: int) -> Tensor:\n"
        << "    h = s.narrow(0, 0, n_centers)\n"
        << "    e = torch.matmul(torch.silu(torch.matmul(h, self.out1_w) + self.out1_b), self.out2_w) + self.out2_b\n"
        << "    cs = species[:n_centers]\n"
        << (repulsion.empty() ? "" : all_edges ? detail::repulsion_source(false) : repulsion)
        << "    return e.squeeze(1) * self.energy_scale[cs] + self.energy_shift[cs]"
        << (repulsion.empty() ? "" : " + e_rep") << "\n";
  }

  // forward, and forward_grouped: the same with static shapes (mlip/model/grouped_graph.h,
  // message-passing layout: the edges into centres first; padding edges on padding centres).
  for (const bool grouped : {false, true}) {
    src << (grouped ? "\ndef forward_grouped(self, species: Tensor, edge_index: Tensor, edge_vectors: Tensor, "
                      "n_centers: int, center_groups: List[int], edge_groups: List[int]) -> Tensor:\n"
                    : "def forward(self, species: Tensor, edge_index: Tensor, edge_vectors: Tensor, n_centers: int) "
                      "-> Tensor:\n")
        << "    center = edge_index[0]\n"
        << "    neighbor = edge_index[1]\n"
        << "    n_out = species.size(0)\n"
        << "    radial, unit = self.mp_edges(edge_vectors)\n"
        << "    s, v = self.mp_embed(species)\n";
    for (int64_t l = 0; l < layers; ++l) {
      // Only the centres' features after the last layer reach the energy: when the graph has
      // other nodes (a halo of ghosts, or other chunks' atoms, in LAMMPS), the last layer passes
      // only the messages into centres and updates only the centres (same sums, less work).
      if (l == layers - 1) src << detail::centre_edges_source(grouped, {"center", "neighbor", "radial", "unit"});
      src << "    s, v = self.mp_layer_" << l << "(s, v, self.mp_node_" << l
          << "(s, v), center, neighbor, radial, unit, n_out)\n";
    }
    src << "    return self.mp_readout" << (grouped ? "_all_edges" : "")
        << "(species, s, edge_index, edge_vectors, n_centers)\n";
  }

  return b.finish(src.str(), spec, "painn", static_cast<int>(layers), resolved);
}

void fit_painn_statistics(BuiltModel& model, const std::vector<const Frame*>& frames) {
  if (model.metadata.hyperparameters.at("neighbor_norm").get<double>() != 0.0) return;
  double edges = 0, centers = 0;
  for (const Frame* f : frames) {
    edges += static_cast<double>(f->num_edges());
    centers += static_cast<double>(f->structure.size());
  }
  torch::NoGradGuard no_grad;  // setting a buffer, not evaluating
  if (edges > 0) model.module.attr("inv_neighbor_norm").toTensor().fill_(centers / edges);
}

}  // namespace mlip
