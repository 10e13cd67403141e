#include <algorithm>
#include <cmath>
#include <type_traits>

#include <fmt/format.h>

#include "mlip/error.h"
#include "training.h"

namespace mlip::trainer {

namespace {

GroupCounts count_groups(const GraphBatch& b) {
  GroupCounts c;
  for (const int64_t s : b.species) c.n_species = std::max(c.n_species, s + 1);
  c.species.assign(static_cast<std::size_t>(c.n_species), 0);
  c.pairs.assign(static_cast<std::size_t>(c.n_species * c.n_species), 0);
  for (const int64_t s : b.species)
    if (s >= 0) ++c.species[static_cast<std::size_t>(s)];
  for (int64_t e = 0; e < b.num_edges; ++e) {
    const int64_t i = b.species[static_cast<std::size_t>(b.edge_index[static_cast<std::size_t>(e)])],
                  j = b.species[static_cast<std::size_t>(b.edge_index[static_cast<std::size_t>(b.num_edges + e)])];
    if (i >= 0 && j >= 0) ++c.pairs[static_cast<std::size_t>(i * c.n_species + j)];
  }
  return c;
}

}  // namespace

void GroupCounts::add(const GroupCounts& o) {
  const int64_t n = std::max(n_species, o.n_species);
  std::vector<int64_t> s(static_cast<std::size_t>(n), 0), p(static_cast<std::size_t>(n * n), 0);
  for (const GroupCounts* c : {static_cast<const GroupCounts*>(this), &o}) {
    for (int64_t a = 0; a < c->n_species; ++a) {
      s[static_cast<std::size_t>(a)] += c->species[static_cast<std::size_t>(a)];
      for (int64_t b = 0; b < c->n_species; ++b)
        p[static_cast<std::size_t>(a * n + b)] += c->pairs[static_cast<std::size_t>(a * c->n_species + b)];
    }
  }
  n_species = n;
  species = std::move(s);
  pairs = std::move(p);
}

BatchTensors group_batch(const BatchTensors& b, const GroupingRule& rule) {
  const int64_t n_species = rule.n_species;
  const bool pair_nets = rule.pair_nets;
  const GroupCounts& c = b.counts;
  if (c.n_species > n_species)
    throw Error("a batch has species index " + std::to_string(c.n_species - 1) + ", outside the model's " +
                std::to_string(n_species));
  BatchTensors t = b;
  // Atoms by species (stable: in their order within one); each atom's new node number.
  const torch::Tensor order = torch::argsort(b.species, /*stable=*/true);
  const torch::Tensor place =
      torch::empty_like(order).index_put_({order}, torch::arange(b.n_atoms, order.options()));
  for (auto member : {&BatchTensors::species, &BatchTensors::frame_of_atom, &BatchTensors::forces,
                      &BatchTensors::has_forces_atom, &BatchTensors::head})
    if ((b.*member).defined()) t.*member = (b.*member).index_select(0, order);
  // Edges by net, then by (new) centre: in a net, each centre's edges in their order.
  const torch::Tensor ends = place.index_select(0, b.edge_index.reshape({-1})).view({2, -1});
  torch::Tensor net = b.species.index_select(0, b.edge_index[1]);
  if (pair_nets) net = net + b.species.index_select(0, b.edge_index[0]) * n_species;
  const torch::Tensor edge_order = torch::argsort(net * std::max<int64_t>(b.n_atoms, 1) + ends[0], /*stable=*/true);
  t.edge_index = ends.index_select(1, edge_order);
  t.edge_vectors = b.edge_vectors.index_select(0, edge_order);
  t.frame_of_edge = b.frame_of_edge.index_select(0, edge_order);
  // The groups' sizes, from the host's counts.
  t.center_groups.assign(static_cast<std::size_t>(n_species), 0);
  t.edge_groups.assign(static_cast<std::size_t>(pair_nets ? n_species * n_species : n_species), 0);
  for (int64_t i = 0; i < c.n_species; ++i) {
    t.center_groups[static_cast<std::size_t>(i)] = c.species[static_cast<std::size_t>(i)];
    for (int64_t j = 0; j < c.n_species; ++j)
      t.edge_groups[static_cast<std::size_t>(pair_nets ? i * n_species + j : j)] +=
          c.pairs[static_cast<std::size_t>(i * c.n_species + j)];
  }
  return t;
}

BatchTensors to_tensors(const GraphBatch& b, torch::Dtype dtype) {
  auto i64 = [](const std::vector<int64_t>& v, std::vector<int64_t> shape) {
    return torch::from_blob(const_cast<int64_t*>(v.data()), shape, torch::kInt64).clone();
  };
  // Always copies: the tensors must outlive the GraphBatch they come from.
  auto real = [&](const std::vector<double>& v, std::vector<int64_t> shape, torch::Dtype as = torch::kFloat64) {
    return torch::from_blob(const_cast<double*>(v.data()), shape, torch::kFloat64).to(as, false, /*copy=*/true);
  };
  auto mask = [&](const std::vector<uint8_t>& v) {
    return torch::from_blob(const_cast<uint8_t*>(v.data()), {static_cast<int64_t>(v.size())}, torch::kUInt8)
        .to(torch::kFloat64, false, /*copy=*/true);
  };
  BatchTensors t;
  t.n_frames = b.num_frames;
  t.n_atoms = b.num_atoms;
  t.species = i64(b.species, {b.num_atoms});
  t.edge_index = i64(b.edge_index, {2, b.num_edges});
  t.edge_vectors = real(b.edge_vectors, {b.num_edges, 3}, dtype);
  t.frame_of_atom = i64(b.frame_of_atom, {b.num_atoms});
  t.frame_of_edge = t.frame_of_atom.index_select(0, t.edge_index[0]);
  std::vector<double> counts(b.num_frames);
  for (int64_t k = 0; k < b.num_frames; ++k) counts[k] = double(b.atom_offset[k + 1] - b.atom_offset[k]);
  t.atoms_per_frame = real(counts, {b.num_frames});
  t.energy = real(b.energy, {b.num_frames});
  t.has_energy = mask(b.has_energy);
  t.forces = real(b.forces, {b.num_atoms, 3});
  t.has_forces_atom = mask(b.has_forces).index_select(0, t.frame_of_atom);
  t.virial = real(b.virial, {b.num_frames, 9});
  t.has_virial = mask(b.has_virial);
  t.any_virial = std::any_of(b.has_virial.begin(), b.has_virial.end(), [](uint8_t v) { return v != 0; });
  t.weight = real(b.weight, {b.num_frames});
  const auto given = std::count_if(b.head.begin(), b.head.end(), [](int64_t h) { return h >= 0; });
  if (given > 0 && given != b.num_frames) throw Error("a batch mixes frames with a head and frames without one");
  if (given > 0) t.head = i64(b.head, {b.num_frames}).index_select(0, t.frame_of_atom);
  t.counts = count_groups(b);
  return t;
}

BatchTensors to_device(const BatchTensors& b, const torch::Device& device) {
  if (b.species.device() == device) return b;
  const bool pin = device.is_cuda();
  auto move = [&](const torch::Tensor& t) { return (pin ? t.pin_memory() : t).to(device, /*non_blocking=*/pin); };
  BatchTensors t = b;
  for (auto member : BatchTensors::kTensors)
    if ((t.*member).defined()) t.*member = move(t.*member);
  return t;
}

BatchTensors concat(const std::vector<const BatchTensors*>& parts) {
  if (parts.size() == 1) return *parts.front();
  BatchTensors t;
  std::vector<torch::Tensor> species, edge_index, frame_of_atom, frame_of_edge;
  auto gather = [&](torch::Tensor BatchTensors::*member) {
    std::vector<torch::Tensor> v;
    for (const BatchTensors* p : parts) v.push_back(p->*member);
    return torch::cat(v);
  };
  for (const BatchTensors* p : parts) {
    edge_index.push_back(p->edge_index + t.n_atoms);       // node numbers after the earlier frames'
    frame_of_atom.push_back(p->frame_of_atom + t.n_frames);
    frame_of_edge.push_back(p->frame_of_edge + t.n_frames);
    t.n_atoms += p->n_atoms;
    t.n_frames += p->n_frames;
    t.counts.add(p->counts);
    t.any_virial = t.any_virial || p->any_virial;
  }
  t.edge_index = torch::cat(edge_index, 1);
  t.frame_of_atom = torch::cat(frame_of_atom);
  t.frame_of_edge = torch::cat(frame_of_edge);
  const auto with_heads = std::count_if(parts.begin(), parts.end(), [](const BatchTensors* p) { return p->head.defined(); });
  if (with_heads != 0 && std::size_t(with_heads) != parts.size())
    throw Error("a batch mixes frames with a head and frames without one");
  for (auto member : BatchTensors::kTensors)  // the rest, concatenated as they are
    if (!(t.*member).defined() && (parts.front()->*member).defined()) t.*member = gather(member);
  return t;
}

namespace {
ModelInput model_input(const BatchTensors& b, bool without_prior = false) {
  return {b.species, b.edge_index, b.edge_vectors, b.n_atoms, b.center_groups, b.edge_groups, b.head, without_prior};
}
// Per-atom energies summed per frame, in `accumulate`.
torch::Tensor frame_energies(const BatchTensors& b, const torch::Tensor& atom_energy, torch::Dtype accumulate) {
  return torch::zeros({b.n_frames}, atom_energy.options().dtype(accumulate))
      .index_add(0, b.frame_of_atom, atom_energy.to(accumulate));
}
}  // namespace

torch::Tensor predict_energy(torch::jit::Module& module, const BatchTensors& b, torch::Dtype accumulate) {
  return frame_energies(b, evaluate_module(module, model_input(b), EdgeGradient::none).atom_energy.detach(), accumulate);
}

Prediction predict(torch::jit::Module& module, const BatchTensors& b, bool create_graph, torch::Dtype accumulate,
                   bool without_prior) {
  const ModelInput in = model_input(b, without_prior);
  const ModelOutput out =
      evaluate_module(module, in, create_graph ? EdgeGradient::differentiable : EdgeGradient::value);
  EdgeForceRequest request;
  request.virial = b.any_virial;  // else nothing to compare with: no graph, no cost
  request.edge_group = b.frame_of_edge;
  request.n_groups = b.n_frames;
  const EdgeForces f = edge_forces(b.edge_index, b.edge_vectors, out.edge_grad.to(accumulate), b.n_atoms, request);
  Prediction p;
  p.energy = frame_energies(b, out.atom_energy, accumulate);
  p.forces = f.forces;
  p.virial = b.any_virial ? f.virial : torch::zeros({b.n_frames, 9}, p.forces.options());
  return p;
}

BatchTensors frames_of_head(const BatchTensors& b, int64_t head) {
  const torch::Tensor frame_head = torch::zeros({b.n_frames}, b.head.options()).index_copy(0, b.frame_of_atom, b.head);
  const torch::Tensor mine = (frame_head == head).to(b.weight.scalar_type());
  BatchTensors t = b;
  t.has_energy = b.has_energy * mine;
  t.has_virial = b.has_virial * mine;
  t.weight = b.weight * mine;
  t.has_forces_atom = b.has_forces_atom * mine.index_select(0, b.frame_of_atom);
  return t;
}

std::string milli(double value, int decimals) {
  if (std::isnan(value)) return "n/a";
  return fmt::format("{:.{}f}", 1e3 * value, decimals);
}

void MetricSums::add(const MetricSums& o) {
  const auto a = pack(), b = o.pack();
  std::vector<double> c(a.size());
  for (std::size_t i = 0; i < a.size(); ++i) c[i] = a[i] + b[i];
  unpack(c);
}

std::vector<double> MetricSums::pack() const {
  return {energy_sq, energy_n, forces_sq, forces_n, virial_sq, virial_n, loss, frames};
}

void MetricSums::unpack(const std::vector<double>& v) {
  energy_sq = v[0], energy_n = v[1], forces_sq = v[2], forces_n = v[3];
  virial_sq = v[4], virial_n = v[5], loss = v[6], frames = v[7];
}

void MetricTotals::add(const torch::Tensor& terms) {
  if (!sums_.defined()) sums_ = torch::tensor(start_.pack(), torch::kFloat64).to(terms.device());
  sums_.add_(terms.detach());
}

MetricSums MetricTotals::read() const {
  if (!sums_.defined()) return start_;
  const torch::Tensor x = sums_.cpu();
  MetricSums m;
  m.unpack(std::vector<double>(x.data_ptr<double>(), x.data_ptr<double>() + x.numel()));
  return m;
}

namespace {

torch::Tensor elementwise_loss(const torch::Tensor& d, const std::string& kind, double delta) {
  if (kind == "huber") return torch::huber_loss(d, torch::zeros_like(d), at::Reduction::None, delta);
  return d * d;
}

}  // namespace

namespace {

// A loss weight as a one-entry tensor of the terms' options.
torch::Tensor entry(double x, const torch::TensorOptions& o) { return torch::full({1}, x, o); }
torch::Tensor entry(const torch::Tensor& x, const torch::TensorOptions& o) { return x.to(o).reshape({1}); }

// The loss of loss_terms(), with its weights (prefactors, normaliser, frames) as host numbers
// (W = double) or as tensors on the device (W = torch::Tensor, 0-dim: a recorded step's inputs).
// `terms` gets MetricSums::pack()'s order in float64 (the counts and the loss scaled there, as
// the host would).
template <class W>
torch::Tensor weighted_loss(const Prediction& p, const BatchTensors& b, const W& pe, const W& pf, const W& pv,
                            const W& normalizer, const W& frames, const std::string& kind, double huber_delta,
                            torch::Tensor* terms) {
  const auto as = p.energy.scalar_type();  // labels are float64: a no-op unless accumulating in float32
  const torch::Tensor n_atoms = b.atoms_per_frame.to(as), has_energy = b.has_energy.to(as);
  const torch::Tensor has_forces = b.has_forces_atom.to(as), has_virial = b.has_virial.to(as);
  const torch::Tensor de = (p.energy - b.energy.to(as)) / n_atoms * has_energy;                 // (F)
  const torch::Tensor df = (p.forces - b.forces.to(as)) * has_forces.unsqueeze(1);              // (N, 3)
  const torch::Tensor dv = (p.virial - b.virial.to(as)) / n_atoms.unsqueeze(1) * has_virial.unsqueeze(1);
  // Per-frame means of the force loss over that frame's 3N components.
  const torch::Tensor lf_frame = torch::zeros({b.n_frames}, df.options())
                                     .index_add(0, b.frame_of_atom, elementwise_loss(df, kind, huber_delta).sum(1)) /
                                 (3.0 * n_atoms);
  const torch::Tensor le = elementwise_loss(de, kind, huber_delta);
  const torch::Tensor lv = elementwise_loss(dv, kind, huber_delta).sum(1) / 9.0;
  torch::Tensor loss;
  if constexpr (std::is_same_v<W, double>) {
    loss = (b.weight.to(as) * (pe * le + pf * lf_frame + pv * lv)).sum() / normalizer;
  } else {
    loss = (b.weight.to(as) * (pe.to(as) * le + pf.to(as) * lf_frame + pv.to(as) * lv)).sum() / normalizer.to(as);
  }
  if (terms) {
    // Metrics only: no autograd history, which the sums over an epoch would otherwise keep alive
    // (every step's graph, the whole epoch's memory).
    const torch::NoGradGuard no_grad;
    const torch::Tensor v = torch::stack({(de * de).sum(), has_energy.sum(), (df * df).sum(), has_forces.sum(),
                                          (dv * dv).sum(), has_virial.sum(), loss.detach()})
                                .to(torch::kFloat64);
    *terms = torch::cat({v.narrow(0, 0, 3), v.narrow(0, 3, 1) * 3.0, v.narrow(0, 4, 1), v.narrow(0, 5, 1) * 9.0,
                         v.narrow(0, 6, 1) * entry(normalizer, v.options()), entry(frames, v.options())});
  }
  return loss;
}

}  // namespace

torch::Tensor loss_terms(const Prediction& p, const BatchTensors& b, const Prefactors& pre, const std::string& kind,
                         double huber_delta, double normalizer, MetricSums* sums, MetricTotals* totals) {
  torch::Tensor terms;
  const torch::Tensor loss = weighted_loss(p, b, pre.energy, pre.forces, pre.virial, normalizer,
                                           static_cast<double>(b.n_frames), kind, huber_delta,
                                           sums || totals ? &terms : nullptr);
  if (totals) totals->add(terms);
  if (sums) {
    // one device-to-host copy for all of them
    const torch::Tensor x = terms.cpu();
    MetricSums m;
    m.unpack(std::vector<double>(x.data_ptr<double>(), x.data_ptr<double>() + x.numel()));
    sums->add(m);
  }
  return loss;
}

torch::Tensor loss_terms(const Prediction& p, const BatchTensors& b, const LossWeights& w, const std::string& kind,
                         double huber_delta, torch::Tensor* terms) {
  return weighted_loss(p, b, w.prefactors[0], w.prefactors[1], w.prefactors[2], w.normalizer, w.frames, kind,
                       huber_delta, terms);
}

}  // namespace mlip::trainer
