#include "frame_bank.h"

#include <algorithm>
#include <string>
#include <tuple>

#include <ATen/ops/index_select.h>
#include <ATen/ops/where.h>

#include "frame_source.h"
#include "mlip/error.h"

namespace mlip::trainer {

namespace {

int64_t nbytes(const torch::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }

// One of the bank's tensors, built frame by frame: its parts gathered on the host, moved to the
// device a piece at a time (move()), and joined there with the padding row at the end, so that
// the host never holds the whole data set (a streamed pack may be larger than its memory); the
// device holds the pieces and their join at once, for this tensor only.
class Column {
 public:
  explicit Column(int64_t dim) : dim_(dim) {}
  int64_t add(torch::Tensor t) {
    host_.push_back(std::move(t));
    return nbytes(host_.back());
  }
  void move(const torch::Device& device) {
    if (host_.empty()) return;
    device_.push_back((host_.size() == 1 ? host_.front() : torch::cat(host_, dim_)).to(device));
    host_.clear();
  }
  torch::Tensor finish(const torch::Tensor& pad, const torch::Device& device) {
    add(pad);
    move(device);
    torch::Tensor all = device_.size() == 1 ? device_.front() : torch::cat(device_, dim_);
    device_.clear();
    return all;
  }

 private:
  int64_t dim_;
  std::vector<torch::Tensor> host_, device_;
};

}  // namespace

FrameBank::FrameBank(const FrameSource& source, const SpeciesMap& species, torch::Dtype dtype, const GroupingRule& rule,
                     const torch::Device& device, int64_t piece_bytes)
    : rule_(rule), device_(device) {
  torch::NoGradGuard no_grad;
  Column forces(0), has_forces(0), ends(1), vectors(0), atoms(0), energy(0), has_energy(0), virial(0), has_virial(0),
      weight(0);
  Column* const columns[] = {&forces, &has_forces, &ends, &vectors, &atoms, &energy, &has_energy, &virial, &has_virial, &weight};
  int64_t on_host = 0;   // bytes of the columns' parts not yet moved
  for (std::size_t f = 0; f < source.size(); ++f) {
    const BatchTensors b = group_batch(host_batch(source, {static_cast<int64_t>(f)}, species, dtype), rule_);
    add_runs(b);
    on_host += forces.add(b.forces) + has_forces.add(b.has_forces_atom) + ends.add(b.edge_index + n_atoms_) +   // bank atom rows
               vectors.add(b.edge_vectors) + atoms.add(b.atoms_per_frame) + energy.add(b.energy) +
               has_energy.add(b.has_energy) + virial.add(b.virial) + has_virial.add(b.has_virial) + weight.add(b.weight);
    n_atoms_ += b.n_atoms;
    n_edges_ += b.edge_index.size(1);
    if (on_host >= piece_bytes) {
      for (Column* c : columns) c->move(device);
      on_host = 0;
    }
  }
  const torch::TensorOptions f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::TensorOptions i64 = torch::TensorOptions().dtype(torch::kInt64);
  forces_ = forces.finish(torch::zeros({1, 3}, f64), device);
  has_forces_atom_ = has_forces.finish(torch::zeros({1}, f64), device);
  // The padding edge: from the padding atom row to itself, beyond the cutoff.
  edge_index_ = ends.finish(torch::full({2, 1}, n_atoms_, i64), device);
  torch::Tensor pad_vector = torch::zeros({1, 3}, f64.dtype(dtype));
  pad_vector[0][0] = rule_.pad_length;
  edge_vectors_ = vectors.finish(pad_vector, device);
  // The padding frame: one atom (nothing divides by zero), no labels, weight zero.
  atoms_per_frame_ = atoms.finish(torch::ones({1}, f64), device);
  energy_ = energy.finish(torch::zeros({1}, f64), device);
  has_energy_ = has_energy.finish(torch::zeros({1}, f64), device);
  virial_ = virial.finish(torch::zeros({1, 9}, f64), device);
  has_virial_t_ = has_virial.finish(torch::zeros({1}, f64), device);
  weight_ = weight.finish(torch::zeros({1}, f64), device);
  node_ = torch::zeros({n_atoms_ + 1}, i64.device(device));
  iota_ = torch::zeros({0}, i64.device(device));
}

void FrameBank::add_runs(const BatchTensors& b) {
  const int64_t n = rule_.n_species, nets = rule_.pair_nets ? n * n : n;
  // Its runs, in the frame's grouped order: atoms by species; edges by net, in a net of one
  // neighbour species by centre species.
  int64_t at = n_atoms_;
  for (int64_t s = 0; s < n; ++s) {
    const int64_t count = b.center_groups[static_cast<std::size_t>(s)];
    if (count > 0) atom_runs_.push_back({s, 0, at, count});
    at += count;
  }
  const GroupCounts& c = b.counts;
  at = n_edges_;
  for (int64_t e = 0; e < nets; ++e) {
    const int64_t nb = rule_.pair_nets ? e % n : e, a0 = rule_.pair_nets ? e / n : 0, a1 = rule_.pair_nets ? a0 + 1 : n;
    for (int64_t a = a0; a < std::min(a1, c.n_species); ++a) {
      const int64_t count = nb < c.n_species ? c.pairs[static_cast<std::size_t>(a * c.n_species + nb)] : 0;
      if (count > 0) edge_runs_.push_back({e, a, at, count});
      at += count;
    }
  }
  atom_run_at_.push_back(static_cast<int64_t>(atom_runs_.size()));
  edge_run_at_.push_back(static_cast<int64_t>(edge_runs_.size()));
  has_virial_.push_back(b.any_virial ? 1 : 0);
}

int64_t FrameBank::bytes() const {
  int64_t n = 0;
  for (const torch::Tensor* t : {&forces_, &has_forces_atom_, &edge_index_, &edge_vectors_, &atoms_per_frame_, &energy_,
                                 &has_energy_, &virial_, &has_virial_t_, &weight_, &node_})
    n += nbytes(*t);
  return n;
}

// group_batch's order: by group (species; net), in a group by centre species (by the centre, whose
// order is by species: in a net of one neighbour species, centre species 0, 1, ...), then by frame.
std::vector<std::pair<FrameBank::Run, int64_t>> FrameBank::in_batch_order(const std::vector<Run>& runs,
                                                                          const std::vector<int64_t>& at,
                                                                          const std::vector<int64_t>& frames) {
  std::vector<std::pair<Run, int64_t>> out;
  for (std::size_t k = 0; k < frames.size(); ++k) {
    const auto f = static_cast<std::size_t>(frames[k]);
    for (int64_t r = at[f]; r < at[f + 1]; ++r) out.emplace_back(runs[static_cast<std::size_t>(r)], static_cast<int64_t>(k));
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& x, const auto& y) {
    return std::tie(x.first.group, x.first.centre, x.second) < std::tie(y.first.group, y.first.centre, y.second);
  });
  return out;
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
    for (int64_t r = atom_run_at_[f]; r < atom_run_at_[f + 1]; ++r) {
      const Run& run = atom_runs_[static_cast<std::size_t>(r)];
      s.center_groups[static_cast<std::size_t>(run.group)] += run.count;
      s.n_atoms += run.count;
    }
    for (int64_t r = edge_run_at_[f]; r < edge_run_at_[f + 1]; ++r) {
      const Run& run = edge_runs_[static_cast<std::size_t>(r)];
      s.edge_groups[static_cast<std::size_t>(run.group)] += run.count;
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

ReadyBatch FrameBank::ready(std::vector<int64_t> frames, const BatchCapacity& expected) {
  auto b = std::make_shared<BankBatch>(batch(std::move(frames), expected));
  return {b->shape, b->capacity, [this, b](const BatchCapacity& cap, BatchTensors& into) {
            if (!(cap == b->capacity)) make_rows(*b, cap);   // grown by a batch the prefetcher did not see
            gather(*b, into);
          }};
}

void FrameBank::make_rows(BankBatch& batch, const BatchCapacity& cap) const {
  const int64_t atoms = cap.atoms(), edges = cap.n_edges(), frames = cap.frames;
  if (static_cast<int64_t>(batch.frames.size()) >= frames)
    throw Error("FrameBank: a batch of " + std::to_string(batch.frames.size()) + " frames padded to " +
                std::to_string(frames) + " (an internal error)");
  batch.rows = torch::empty({2 * atoms + edges + frames},
                            torch::TensorOptions().dtype(torch::kInt64).pinned_memory(device_.is_cuda()));
  int64_t* atom_row = batch.rows.data_ptr<int64_t>();
  int64_t* frame_of_atom = atom_row + atoms;
  int64_t* edge_row = frame_of_atom + atoms;
  int64_t* frame_row = edge_row + edges;
  // Each group's runs, then its padding rows (`pad_row(k)` for the group's k-th; their frame
  // `pad_frame`); `frame_of`: where each row's frame in the batch goes, if anywhere.
  const auto place = [](const std::vector<std::pair<Run, int64_t>>& runs, const std::vector<int64_t>& capacity,
                        int64_t* rows, int64_t* frame_of, const auto& pad_row, int64_t pad_frame) {
    int64_t n_pad = 0;   // padding rows so far
    std::size_t r = 0;
    int64_t at = 0;
    for (std::size_t g = 0; g < capacity.size(); ++g) {
      const int64_t end = at + capacity[g];
      for (; r < runs.size() && runs[r].first.group == static_cast<int64_t>(g); ++r) {
        const auto& [run, k] = runs[r];
        if (at + run.count > end) throw Error("FrameBank: a batch outgrows the capacity it was padded to (an internal error)");
        for (int64_t i = 0; i < run.count; ++i) rows[at + i] = run.first + i;
        if (frame_of) std::fill(frame_of + at, frame_of + at + run.count, k);
        at += run.count;
      }
      for (int64_t i = at; i < end; ++i) rows[i] = pad_row(n_pad++);
      if (frame_of) std::fill(frame_of + at, frame_of + end, pad_frame);
      at = end;
    }
    if (r != runs.size()) throw Error("FrameBank: a batch has a group its capacity lacks (an internal error)");
  };
  place(in_batch_order(atom_runs_, atom_run_at_, batch.frames), cap.centers, atom_row, frame_of_atom,
        [this](int64_t) { return n_atoms_; }, frames - 1);
  // A padding edge's row: -1 - the padding atom it joins to itself (gather() makes it so).
  const std::vector<int64_t> pad_ends =
      padding_edge_ends(batch.shape.center_groups, cap.centers, batch.shape.edge_groups, cap.edges);
  place(in_batch_order(edge_runs_, edge_run_at_, batch.frames), cap.edges, edge_row, nullptr,
        [&pad_ends](int64_t k) { return -1 - pad_ends[static_cast<std::size_t>(k)]; }, 0);
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
  // Edges: their ends' bank rows, then each bank row's node in the batch; a padding edge (row
  // -1 - a: the bank's padding edge) joins padding atom a to itself.
  ensure_shape(into.edge_index, {2, edges}, i64);
  ensure_shape(into.edge_vectors, {edges, 3}, edge_vectors_.options());
  ensure_shape(into.frame_of_edge, {edges}, i64);
  if (edges > 0) {
    if (iota_.size(0) < atoms) iota_ = torch::arange(atoms, i64);
    node_.index_copy_(0, atom_row, iota_.narrow(0, 0, atoms));
    const torch::Tensor padding = edge_row.lt(0), bank_row = edge_row.masked_fill(padding, n_edges_);
    torch::Tensor flat = into.edge_index.view({-1});
    at::index_select_out(flat, node_, 0, edge_index_.index_select(1, bank_row).view({-1}));
    at::where_out(into.edge_index, padding, edge_row.bitwise_not(), into.edge_index);   // ~r = -1 - r
    at::index_select_out(into.edge_vectors, edge_vectors_, 0, bank_row);
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
