#include "frame_bank.h"

#include <algorithm>
#include <string>

#include <ATen/ops/index_select.h>

#include "frame_source.h"
#include "mlip/error.h"

namespace mlip::trainer {

namespace {

// The tensors `parts` one after another, then the row `pad`, on `device`.
torch::Tensor stack_with_pad(std::vector<torch::Tensor>& parts, const torch::Tensor& pad, int64_t dim,
                             const torch::Device& device) {
  parts.push_back(pad);
  torch::Tensor all = torch::cat(parts, dim).to(device);
  parts.clear();
  return all;
}

int64_t nbytes(const torch::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

}  // namespace

FrameBank::FrameBank(const FrameSource& source, const SpeciesMap& species, torch::Dtype dtype, const GroupingRule& rule,
                     const torch::Device& device)
    : rule_(rule), device_(device) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> forces, has_forces, ends, vectors, atoms, energy, has_energy, virial, has_virial, weight;
  for (std::size_t f = 0; f < source.size(); ++f) {
    const BatchTensors b = group_batch(host_batch(source, {static_cast<int64_t>(f)}, species, dtype), rule_);
    atom_base_.push_back(n_atoms_);
    edge_base_.push_back(n_edges_);
    counts_.push_back(b.counts);
    has_virial_.push_back(b.any_virial ? 1 : 0);
    forces.push_back(b.forces);
    has_forces.push_back(b.has_forces_atom);
    ends.push_back(b.edge_index + n_atoms_);   // bank atom rows
    vectors.push_back(b.edge_vectors);
    for (auto [to, from] : {std::pair{&atoms, &b.atoms_per_frame}, {&energy, &b.energy}, {&has_energy, &b.has_energy},
                            {&virial, &b.virial}, {&has_virial, &b.has_virial}, {&weight, &b.weight}})
      to->push_back(*from);
    n_atoms_ += b.n_atoms;
    n_edges_ += b.edge_index.size(1);
  }
  const torch::TensorOptions f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::TensorOptions i64 = torch::TensorOptions().dtype(torch::kInt64);
  forces_ = stack_with_pad(forces, torch::zeros({1, 3}, f64), 0, device);
  has_forces_atom_ = stack_with_pad(has_forces, torch::zeros({1}, f64), 0, device);
  // The padding edge: from the padding atom row to itself, beyond the cutoff.
  edge_index_ = stack_with_pad(ends, torch::full({2, 1}, n_atoms_, i64), 1, device);
  torch::Tensor pad_vector = torch::zeros({1, 3}, f64.dtype(dtype));
  pad_vector[0][0] = rule_.pad_length;
  edge_vectors_ = stack_with_pad(vectors, pad_vector, 0, device);
  // The padding frame: one atom (nothing divides by zero), no labels, weight zero.
  atoms_per_frame_ = stack_with_pad(atoms, torch::ones({1}, f64), 0, device);
  energy_ = stack_with_pad(energy, torch::zeros({1}, f64), 0, device);
  has_energy_ = stack_with_pad(has_energy, torch::zeros({1}, f64), 0, device);
  virial_ = stack_with_pad(virial, torch::zeros({1, 9}, f64), 0, device);
  has_virial_t_ = stack_with_pad(has_virial, torch::zeros({1}, f64), 0, device);
  weight_ = stack_with_pad(weight, torch::zeros({1}, f64), 0, device);
  node_ = torch::zeros({n_atoms_ + 1}, i64.device(device));
}

int64_t FrameBank::bytes() const {
  int64_t n = 0;
  for (const torch::Tensor* t : {&forces_, &has_forces_atom_, &edge_index_, &edge_vectors_, &atoms_per_frame_, &energy_,
                                 &has_energy_, &virial_, &has_virial_t_, &weight_, &node_})
    n += nbytes(*t);
  return n;
}

int64_t FrameBank::species_count(std::size_t f, int64_t s) const {
  const GroupCounts& c = counts_[f];
  return s < c.n_species ? c.species[static_cast<std::size_t>(s)] : 0;
}

int64_t FrameBank::pair_count(std::size_t f, int64_t a, int64_t b) const {
  const GroupCounts& c = counts_[f];
  return a < c.n_species && b < c.n_species ? c.pairs[static_cast<std::size_t>(a * c.n_species + b)] : 0;
}

// group_batch's order of one frame's edges: by net (the pair a * n + b, or the neighbour's species
// b), within a net by centre, whose order is by species: in a net of one neighbour species, the
// runs of centre species 0, 1, ...
int64_t FrameBank::edge_run(std::size_t f, int64_t a, int64_t b) const {
  const int64_t n = rule_.n_species;
  int64_t start = 0;
  for (int64_t b2 = 0; b2 < n; ++b2)
    for (int64_t a2 = 0; a2 < n; ++a2) {
      const bool before = rule_.pair_nets ? a2 * n + b2 < a * n + b : b2 < b || (b2 == b && a2 < a);
      if (before) start += pair_count(f, a2, b2);
    }
  return start;
}

BankBatch FrameBank::batch(std::vector<int64_t> frames, BatchCapacity expected) const {
  const int64_t n = rule_.n_species;
  BankBatch out;
  BatchTensors& s = out.shape;
  s.n_frames = static_cast<int64_t>(frames.size());
  s.center_groups.assign(static_cast<std::size_t>(n), 0);
  s.edge_groups.assign(static_cast<std::size_t>(rule_.pair_nets ? n * n : n), 0);
  for (const int64_t k : frames) {
    if (k < 0 || static_cast<std::size_t>(k) >= size())
      throw Error("FrameBank: frame " + std::to_string(k) + " is not among its " + std::to_string(size()));
    const auto f = static_cast<std::size_t>(k);
    s.any_virial = s.any_virial || has_virial_[f] != 0;
    for (int64_t a = 0; a < n; ++a) {
      s.center_groups[static_cast<std::size_t>(a)] += species_count(f, a);
      s.n_atoms += species_count(f, a);
      for (int64_t b = 0; b < n; ++b)
        s.edge_groups[static_cast<std::size_t>(rule_.pair_nets ? a * n + b : b)] += pair_count(f, a, b);
    }
  }
  // Each frame's atoms get one node in the batch (gather's renumbering): a frame once a batch.
  std::vector<int64_t> sorted = frames;
  std::sort(sorted.begin(), sorted.end());
  const auto twice = std::adjacent_find(sorted.begin(), sorted.end());
  if (twice != sorted.end())
    throw Error("FrameBank: a batch holds frame " + std::to_string(*twice) + " twice (an internal error)");
  out.frames = std::move(frames);
  fit_capacity(s, expected);
  make_rows(out, expected);
  return out;
}

void FrameBank::make_rows(BankBatch& batch, const BatchCapacity& cap) const {
  const int64_t n = rule_.n_species, atoms = cap.atoms(), edges = cap.n_edges(), frames = cap.frames;
  if (static_cast<int64_t>(batch.frames.size()) >= frames)
    throw Error("FrameBank: a batch of " + std::to_string(batch.frames.size()) + " frames padded to " +
                std::to_string(frames) + " (an internal error)");
  batch.rows = torch::empty({2 * atoms + edges + frames},
                        torch::TensorOptions().dtype(torch::kInt64).pinned_memory(device_.is_cuda()));
  int64_t* atom_row = batch.rows.data_ptr<int64_t>();
  int64_t* frame_of_atom = atom_row + atoms;
  int64_t* edge_row = frame_of_atom + atoms;
  int64_t* frame_row = edge_row + edges;
  // Fills [at, at + count) of `to` with first, first + 1, ...; throws where a group outgrows `end`.
  auto fill_run = [](int64_t* to, int64_t& at, int64_t end, int64_t first, int64_t count) {
    if (at + count > end) throw Error("FrameBank: a batch outgrows the capacity it was padded to (an internal error)");
    for (int64_t r = 0; r < count; ++r) to[at + r] = first + r;
    at += count;
  };
  // Atoms: each species' group, frame by frame, then its padding atoms (the padding row, the last frame).
  int64_t at = 0;
  for (int64_t s = 0; s < n && s < static_cast<int64_t>(cap.centers.size()); ++s) {
    const int64_t end = at + cap.centers[static_cast<std::size_t>(s)];
    for (std::size_t k = 0; k < batch.frames.size(); ++k) {
      const auto f = static_cast<std::size_t>(batch.frames[k]);
      int64_t first = atom_base_[f];
      for (int64_t s2 = 0; s2 < s; ++s2) first += species_count(f, s2);
      const int64_t from = at;
      fill_run(atom_row, at, end, first, species_count(f, s));
      std::fill(frame_of_atom + from, frame_of_atom + at, static_cast<int64_t>(k));
    }
    std::fill(atom_row + at, atom_row + end, n_atoms_);
    std::fill(frame_of_atom + at, frame_of_atom + end, frames - 1);
    at = end;
  }
  // Edges: each net's group (in a net of one neighbour species: centre species by species, each
  // frame by frame), then its padding edges.
  at = 0;
  for (std::size_t e = 0; e < cap.edges.size(); ++e) {
    const int64_t end = at + cap.edges[e], net = static_cast<int64_t>(e);
    const int64_t a0 = rule_.pair_nets ? net / n : 0, a1 = rule_.pair_nets ? a0 + 1 : n;
    const int64_t nb = rule_.pair_nets ? net % n : net;
    for (int64_t a = a0; a < a1; ++a)
      for (const int64_t k : batch.frames) {
        const auto f = static_cast<std::size_t>(k);
        fill_run(edge_row, at, end, edge_base_[f] + edge_run(f, a, nb), pair_count(f, a, nb));
      }
    std::fill(edge_row + at, edge_row + end, n_edges_);
    at = end;
  }
  for (int64_t k = 0; k < frames; ++k)
    frame_row[k] = k < static_cast<int64_t>(batch.frames.size()) ? batch.frames[static_cast<std::size_t>(k)]
                                                               : static_cast<int64_t>(size());
  batch.capacity = cap;
}

void FrameBank::gather(const BankBatch& b, BatchTensors& into) {
  torch::NoGradGuard no_grad;
  const BatchCapacity& cap = b.capacity;
  const int64_t atoms = cap.atoms(), edges = cap.n_edges(), frames = cap.frames;
  const torch::TensorOptions i64 = torch::TensorOptions().dtype(torch::kInt64).device(device_);
  set_padded_shape(cap, i64, into);
  const torch::Tensor rows = b.rows.to(device_, /*non_blocking=*/true);   // the step's one copy
  const torch::Tensor atom_row = rows.narrow(0, 0, atoms), edge_row = rows.narrow(0, 2 * atoms, edges),
                      frame_row = rows.narrow(0, 2 * atoms + edges, frames);
  ensure_shape(into.frame_of_atom, {atoms}, i64);
  into.frame_of_atom.copy_(rows.narrow(0, atoms, atoms));
  for (auto [to, from] : {std::pair{&into.forces, &forces_}, {&into.has_forces_atom, &has_forces_atom_}}) {
    std::vector<int64_t> shape = from->sizes().vec();
    shape[0] = atoms;
    ensure_shape(*to, shape, from->options());
    at::index_select_out(*to, *from, 0, atom_row);
  }
  // Edges: their ends' bank rows, then each bank row's node in the batch (the padding row's: the
  // last atom, a padding atom).
  ensure_shape(into.edge_index, {2, edges}, i64);
  ensure_shape(into.edge_vectors, {edges, 3}, edge_vectors_.options());
  ensure_shape(into.frame_of_edge, {edges}, i64);
  if (edges > 0) {
    node_.index_copy_(0, atom_row, torch::arange(atoms, i64));
    node_.narrow(0, n_atoms_, 1).fill_(atoms - 1);
    torch::Tensor flat = into.edge_index.view({-1});
    at::index_select_out(flat, node_, 0, edge_index_.index_select(1, edge_row).view({-1}));
    at::index_select_out(into.edge_vectors, edge_vectors_, 0, edge_row);
    at::index_select_out(into.frame_of_edge, into.frame_of_atom, 0, into.edge_index[0]);
  }
  for (auto [to, from] : {std::pair{&into.atoms_per_frame, &atoms_per_frame_}, {&into.energy, &energy_},
                          {&into.has_energy, &has_energy_}, {&into.virial, &virial_}, {&into.has_virial, &has_virial_t_},
                          {&into.weight, &weight_}}) {
    std::vector<int64_t> shape = from->sizes().vec();
    shape[0] = frames;
    ensure_shape(*to, shape, from->options());
    at::index_select_out(*to, *from, 0, frame_row);
  }
}

}  // namespace mlip::trainer
