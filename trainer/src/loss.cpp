#include <algorithm>
#include <cmath>

#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/jit/runtime/graph_executor.h>

#include "training.h"

namespace mlip::trainer {

BatchTensors to_tensors(const GraphBatch& b, torch::Dtype dtype) {
  auto i64 = [](const std::vector<int64_t>& v, std::vector<int64_t> shape) {
    return torch::from_blob(const_cast<int64_t*>(v.data()), shape, torch::kInt64).clone();
  };
  auto real = [&](const std::vector<double>& v, std::vector<int64_t> shape) {
    // Always a copy: the tensors must outlive the GraphBatch they come from.
    return torch::from_blob(const_cast<double*>(v.data()), shape, torch::kFloat64).to(dtype, false, /*copy=*/true);
  };
  auto mask = [&](const std::vector<uint8_t>& v) {
    return torch::from_blob(const_cast<uint8_t*>(v.data()), {static_cast<int64_t>(v.size())}, torch::kUInt8)
        .to(dtype, false, /*copy=*/true);
  };
  BatchTensors t;
  t.n_frames = b.num_frames;
  t.n_atoms = b.num_atoms;
  t.species = i64(b.species, {b.num_atoms});
  t.edge_index = i64(b.edge_index, {2, b.num_edges});
  t.edge_vectors = real(b.edge_vectors, {b.num_edges, 3});
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
  return t;
}

Prediction predict(torch::jit::Module& module, const BatchTensors& b, bool create_graph) {
  torch::Tensor vectors = b.edge_vectors.detach().requires_grad_(true);
  torch::jit::GraphOptimizerEnabledGuard optimize(optimize_graphs_on(vectors.device()));
  const torch::Tensor atom_energy =
      module.forward({b.species, b.edge_index, vectors, b.n_atoms}).toTensor();
  Prediction p;
  p.energy = torch::zeros({b.n_frames}, atom_energy.options()).index_add(0, b.frame_of_atom, atom_energy);
  torch::Tensor g = torch::autograd::grad({p.energy.sum()}, {vectors}, {}, /*retain_graph=*/create_graph,
                                          create_graph, /*allow_unused=*/true)[0];
  if (!g.defined()) g = torch::zeros_like(vectors);
  // g = dE/dr_ij with r_ij = x_j - x_i: F_i += g, F_j -= g; W = -sum r (x) g per frame.
  p.forces = torch::zeros({b.n_atoms, 3}, g.options()).index_add(0, b.edge_index[0], g).index_add(0, b.edge_index[1], -g);
  if (b.any_virial) {
    const torch::Tensor w = -(b.edge_vectors.unsqueeze(2) * g.unsqueeze(1)).reshape({-1, 9});
    p.virial = torch::zeros({b.n_frames, 9}, g.options()).index_add(0, b.frame_of_edge, w);
  } else {
    p.virial = torch::zeros({b.n_frames, 9}, g.options());  // nothing to compare with: no graph, no cost
  }
  if (!create_graph) {
    p.energy = p.energy.detach();
    p.forces = p.forces.detach();
    p.virial = p.virial.detach();
  }
  return p;
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

namespace {

torch::Tensor elementwise_loss(const torch::Tensor& d, const std::string& kind, double delta) {
  if (kind == "huber") return torch::huber_loss(d, torch::zeros_like(d), at::Reduction::None, delta);
  return d * d;
}

}  // namespace

torch::Tensor loss_terms(const Prediction& p, const BatchTensors& b, const Prefactors& pre, const std::string& kind,
                         double huber_delta, double normalizer, MetricSums* sums) {
  const torch::Tensor de = (p.energy - b.energy) / b.atoms_per_frame * b.has_energy;            // (F)
  const torch::Tensor df = (p.forces - b.forces) * b.has_forces_atom.unsqueeze(1);              // (N, 3)
  const torch::Tensor dv = (p.virial - b.virial) / b.atoms_per_frame.unsqueeze(1) * b.has_virial.unsqueeze(1);
  // Per-frame means of the force loss over that frame's 3N components.
  const torch::Tensor lf_frame = torch::zeros({b.n_frames}, df.options())
                                     .index_add(0, b.frame_of_atom, elementwise_loss(df, kind, huber_delta).sum(1)) /
                                 (3.0 * b.atoms_per_frame);
  const torch::Tensor le = elementwise_loss(de, kind, huber_delta);
  const torch::Tensor lv = elementwise_loss(dv, kind, huber_delta).sum(1) / 9.0;
  const torch::Tensor per_frame = pre.energy * le + pre.forces * lf_frame + pre.virial * lv;
  const torch::Tensor loss = (b.weight * per_frame).sum() / normalizer;
  if (sums) {
    MetricSums m;
    m.energy_sq = (de * de).sum().item<double>();
    m.energy_n = b.has_energy.sum().item<double>();
    m.forces_sq = (df * df).sum().item<double>();
    m.forces_n = 3.0 * b.has_forces_atom.sum().item<double>();
    m.virial_sq = (dv * dv).sum().item<double>();
    m.virial_n = 9.0 * b.has_virial.sum().item<double>();
    m.loss = loss.item<double>() * normalizer;
    m.frames = static_cast<double>(b.n_frames);
    sums->add(m);
  }
  return loss;
}

Schedule::Schedule(const Config& c, int64_t total_steps)
    : cfg_(c.schedule), lr0_(c.lr), total_(std::max<int64_t>(1, total_steps)), e_(c.energy), f_(c.forces),
      v_(c.virial) {}

double Schedule::lr(int64_t step) const {
  const double t = std::min(1.0, std::max(double(step) / double(total_), time_fraction_));
  double lr = lr0_;
  if (cfg_.type == "exponential") {
    lr = lr0_ * std::pow(cfg_.final_lr / lr0_, t);
  } else if (cfg_.type == "cosine") {
    lr = cfg_.final_lr + (lr0_ - cfg_.final_lr) * 0.5 * (1.0 + std::cos(M_PI * t));
  } else if (cfg_.type == "plateau") {
    lr = std::max(cfg_.final_lr, lr0_ * plateau_scale_);
  }
  if (cfg_.warmup_steps > 0 && step < cfg_.warmup_steps) lr *= double(step + 1) / double(cfg_.warmup_steps);
  return lr;
}

Prefactors Schedule::prefactors(int64_t step) const {
  const double r = lr(step) / lr0_;
  return {e_.limit + (e_.start - e_.limit) * r, f_.limit + (f_.start - f_.limit) * r,
          v_.limit + (v_.start - v_.limit) * r};
}

Prefactors Schedule::limits() const { return {e_.limit, f_.limit, v_.limit}; }

bool Schedule::end_epoch(double metric) {
  if (cfg_.type != "plateau") return false;
  if (metric < plateau_best_ * (1.0 - cfg_.threshold)) {
    plateau_best_ = metric;
    plateau_bad_epochs_ = 0;
    return false;
  }
  if (++plateau_bad_epochs_ <= cfg_.patience) return false;
  plateau_bad_epochs_ = 0;
  if (lr0_ * plateau_scale_ <= cfg_.final_lr) return false;  // already at the floor
  plateau_scale_ *= cfg_.factor;
  return true;
}

nlohmann::json Schedule::state() const {
  // JSON has no infinity: an unset best is written as null.
  return {{"plateau_scale", plateau_scale_},
          {"plateau_best", std::isfinite(plateau_best_) ? nlohmann::json(plateau_best_) : nlohmann::json()},
          {"plateau_bad_epochs", plateau_bad_epochs_}};
}

void Schedule::restore(const nlohmann::json& state) {
  if (state.is_null()) return;  // checkpoint from before reduce-on-plateau existed
  plateau_scale_ = state.at("plateau_scale").get<double>();
  plateau_best_ = state.at("plateau_best").is_null() ? std::numeric_limits<double>::infinity()
                                                       : state.at("plateau_best").get<double>();
  plateau_bad_epochs_ = state.at("plateau_bad_epochs").get<int64_t>();
}

}  // namespace mlip::trainer
