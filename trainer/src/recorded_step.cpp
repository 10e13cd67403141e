#include "recorded_step.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_set>

#include <fmt/format.h>
#include <ATen/Context.h>
#include <ATen/ops/_foreach_add.h>
#include <ATen/ops/_foreach_mul.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/autograd.h>

#include "mlip/error.h"
#include "mlip/model/cuda_graph_recorder.h"
#include "mlip/model/host_reads.h"
#include "mlip/ops/operators.h"

namespace mlip::trainer {

namespace {

std::vector<int64_t> starts_of(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> s(sizes.size(), 0);
  if (!sizes.empty()) std::partial_sum(sizes.begin(), sizes.end() - 1, s.begin() + 1);
  return s;
}

// Rows [to_start, to_start + capacity) of `to` along `dim`: the first n from rows [from_start,
// from_start + n) of `from`, the rest `pad`.
void place(torch::Tensor& to, int64_t dim, int64_t to_start, int64_t capacity, const torch::Tensor& from,
           int64_t from_start, int64_t n, double pad) {
  if (n > 0) to.narrow(dim, to_start, n).copy_(from.narrow(dim, from_start, n), /*non_blocking=*/true);
  if (capacity > n) to.narrow(dim, to_start + n, capacity - n).fill_(pad);
}

// Every per-frame tensor: the batch's frames, then padding frames (no label, weight zero, one
// atom so that nothing divides by zero).
void place_frames(const BatchTensors& b, int64_t frames, BatchTensors& into) {
  const std::pair<torch::Tensor BatchTensors::*, double> per_frame[] = {
      {&BatchTensors::atoms_per_frame, 1.0}, {&BatchTensors::energy, 0.0}, {&BatchTensors::has_energy, 0.0},
      {&BatchTensors::virial, 0.0},          {&BatchTensors::has_virial, 0.0}, {&BatchTensors::weight, 0.0}};
  for (const auto& [member, pad] : per_frame) {
    const torch::Tensor& from = b.*member;
    std::vector<int64_t> shape = from.sizes().vec();
    shape[0] = frames;
    ensure_shape(into.*member, shape, from.options());
    place(into.*member, 0, 0, frames, from, 0, b.n_frames, pad);
  }
}

}  // namespace

void ensure_shape(torch::Tensor& to, at::IntArrayRef shape, const torch::TensorOptions& o) {
  if (!to.defined() || to.sizes() != shape || to.scalar_type() != o.dtype().toScalarType() || to.device() != o.device())
    to = torch::empty(shape, o);
}

void set_padded_shape(const BatchCapacity& cap, const torch::TensorOptions& i64, BatchTensors& into) {
  into.n_frames = cap.frames;
  into.n_atoms = cap.atoms();
  into.any_virial = cap.virial;
  into.center_groups = cap.centers;
  into.edge_groups = cap.edges;
  into.head = torch::Tensor();
  // Each species' group of slots, its padding atoms last; the species of each slot never change.
  if (!into.species.defined() || into.species.size(0) != into.n_atoms || into.species.device() != i64.device()) {
    into.species = torch::empty({into.n_atoms}, i64);
    int64_t at = 0;
    for (std::size_t s = 0; s < cap.centers.size(); ++s) {
      into.species.narrow(0, at, cap.centers[s]).fill_(static_cast<int64_t>(s));
      at += cap.centers[s];
    }
  }
}

int64_t BatchCapacity::atoms() const { return std::accumulate(centers.begin(), centers.end(), int64_t{0}); }
int64_t BatchCapacity::n_edges() const { return std::accumulate(edges.begin(), edges.end(), int64_t{0}); }

bool fit_capacity(const BatchTensors& b, BatchCapacity& cap) {
  const BatchCapacity before = cap;
  if (b.n_frames + 1 > cap.frames) {   // the padding frame, and room for batches with a few more
    const auto wanted = static_cast<int64_t>(std::ceil(1.1 * static_cast<double>(b.n_frames + 1)));
    cap.frames = (wanted + 7) / 8 * 8;
  }
  cap.virial = cap.virial || b.any_virial;
  // Each species' group keeps a free slot: a padding atom, for the padding edges to join to itself
  // (padding_edge_ends()) and the padding frame to hold.
  grow_capacities(b.center_groups, cap.centers, /*spare=*/true);
  grow_capacities(b.edge_groups, cap.edges);
  // The padding measured against the batch's own atoms (not the capacities, which would let it
  // pile up growth after growth).
  const int64_t largest = cap.centers.empty() ? 0 : *std::max_element(cap.centers.begin(), cap.centers.end());
  const int64_t atoms = std::accumulate(b.center_groups.begin(), b.center_groups.end(), int64_t{0});
  if (largest * static_cast<int64_t>(cap.centers.size()) - atoms <= kEqualCenterGroupsSlack)
    std::fill(cap.centers.begin(), cap.centers.end(), largest);
  return !(cap == before);
}

void raise_capacity(BatchCapacity& cap, const BatchCapacity& at_least) {
  cap.frames = std::max(cap.frames, at_least.frames);
  cap.virial = cap.virial || at_least.virial;
  for (auto [mine, wanted] : {std::pair{&cap.centers, &at_least.centers}, {&cap.edges, &at_least.edges}}) {
    mine->resize(std::max(mine->size(), wanted->size()), 0);
    for (std::size_t k = 0; k < wanted->size(); ++k) (*mine)[k] = std::max((*mine)[k], (*wanted)[k]);
  }
}

void check_groups_agree(Communicator& comm, std::size_t centers, std::size_t edges) {
  const auto ranks = static_cast<std::size_t>(comm.size()), me = static_cast<std::size_t>(comm.rank());
  const std::vector<double> groups = gather_rows(comm, {static_cast<double>(centers), static_cast<double>(edges)});
  for (std::size_t r = 0; r < ranks; ++r)
    if (groups[2 * r] != static_cast<double>(centers) || groups[2 * r + 1] != static_cast<double>(edges))
      throw Error("training.cuda_graph: rank " + std::to_string(r) + "'s batches are grouped otherwise (" +
                  std::to_string(static_cast<int64_t>(groups[2 * r])) + " species, " +
                  std::to_string(static_cast<int64_t>(groups[2 * r + 1])) + " nets) than rank " + std::to_string(me) +
                  "'s (" + std::to_string(centers) + ", " + std::to_string(edges) + "; an internal error)");
}

BatchCapacity largest_over_ranks(Communicator& comm, const BatchCapacity& mine) {
  // Every rank's entries (rows as wide on every rank: check_groups_agree).
  const std::size_t nc = mine.centers.size(), ne = mine.edges.size(), width = 2 + nc + ne;
  const auto ranks = static_cast<std::size_t>(comm.size());
  std::vector<double> row = {static_cast<double>(mine.frames), mine.virial ? 1.0 : 0.0};
  row.insert(row.end(), mine.centers.begin(), mine.centers.end());
  row.insert(row.end(), mine.edges.begin(), mine.edges.end());
  const std::vector<double> rows = gather_rows(comm, row);
  BatchCapacity out = mine;
  for (std::size_t r = 0; r < ranks; ++r) {
    const double* theirs = rows.data() + r * width;
    BatchCapacity other;
    other.frames = static_cast<int64_t>(theirs[0]);
    other.virial = theirs[1] != 0.0;
    other.centers.assign(theirs + 2, theirs + 2 + nc);
    other.edges.assign(theirs + 2 + nc, theirs + width);
    raise_capacity(out, other);
  }
  return out;
}

void pad_batch(const BatchTensors& b, const BatchCapacity& cap, double pad_length, BatchTensors& into) {
  if (b.center_groups.size() != cap.centers.size() || b.edge_groups.size() != cap.edges.size())
    throw Error("pad_batch: the batch is not grouped as the capacity is (group_batch first)");
  const torch::TensorOptions i64 = b.species.options();
  const int64_t pad_frame = cap.frames - 1;
  set_padded_shape(cap, i64, into);
  // Atoms: each species' group, then its padding atoms.
  const std::vector<int64_t> from_atom = starts_of(b.center_groups), to_atom = starts_of(cap.centers);
  ensure_shape(into.frame_of_atom, {into.n_atoms}, i64);
  ensure_shape(into.forces, {into.n_atoms, 3}, b.forces.options());
  ensure_shape(into.has_forces_atom, {into.n_atoms}, b.has_forces_atom.options());
  std::vector<torch::Tensor> node_map;   // each atom's number in the padded batch
  for (std::size_t s = 0; s < cap.centers.size(); ++s) {
    const int64_t n = b.center_groups[s], at = to_atom[s], from = from_atom[s], c = cap.centers[s];
    place(into.frame_of_atom, 0, at, c, b.frame_of_atom, from, n, static_cast<double>(pad_frame));
    place(into.forces, 0, at, c, b.forces, from, n, 0.0);
    place(into.has_forces_atom, 0, at, c, b.has_forces_atom, from, n, 0.0);
    if (n > 0) node_map.push_back(torch::arange(at, at + n, i64));
  }
  // Edges: each net's group, then its padding edges (beyond the cutoff, each from a padding atom
  // to itself: the padding atoms in turn, as padding_edge_ends() spreads them; fit_capacity keeps
  // a free slot in each species' group).
  const int64_t e_all = cap.n_edges();
  const std::vector<int64_t> ends_of_pads = padding_edge_ends(b.center_groups, cap.centers, b.edge_groups, cap.edges);
  // On b's device in one copy (from pinned memory, which LibTorch keeps until the copy ran).
  torch::Tensor pad_ends = torch::from_blob(const_cast<int64_t*>(ends_of_pads.data()),
                                            {static_cast<int64_t>(ends_of_pads.size())}, torch::kInt64);
  if (i64.device().is_cuda()) pad_ends = pad_ends.pin_memory().to(i64.device(), /*non_blocking=*/true);
  int64_t pad_at = 0;   // the next padding edge's entry in pad_ends
  ensure_shape(into.edge_index, {2, e_all}, i64);
  ensure_shape(into.edge_vectors, {e_all, 3}, b.edge_vectors.options());
  ensure_shape(into.frame_of_edge, {e_all}, i64);
  const torch::Tensor ends = node_map.empty() || b.edge_index.size(1) == 0
                                 ? b.edge_index
                                 : torch::cat(node_map).index_select(0, b.edge_index.reshape({-1})).view({2, -1});
  const std::vector<int64_t> from_edge = starts_of(b.edge_groups), to_edge = starts_of(cap.edges);
  for (std::size_t e = 0; e < cap.edges.size(); ++e) {
    const int64_t n = b.edge_groups[e], at = to_edge[e], from = from_edge[e], c = cap.edges[e];
    place(into.edge_index, 1, at, n, ends, from, n, 0.0);
    if (c > n) {
      into.edge_index.narrow(1, at + n, c - n).copy_(pad_ends.narrow(0, pad_at, c - n).unsqueeze(0).expand({2, c - n}));
      pad_at += c - n;
    }
    place(into.edge_vectors, 0, at, c, b.edge_vectors, from, n, 0.0);
    if (c > n) into.edge_vectors.narrow(0, at + n, c - n).select(1, 0).fill_(pad_length);
    place(into.frame_of_edge, 0, at, c, b.frame_of_edge, from, n, static_cast<double>(pad_frame));
  }
  place_frames(b, cap.frames, into);
}

ReadyBatch ready_on_host(const BatchTensors& b, BatchCapacity expected, double pad_length, const torch::Device& device) {
  ReadyBatch r;
  r.shape.n_frames = b.n_frames;
  r.shape.n_atoms = b.n_atoms;
  r.shape.any_virial = b.any_virial;
  r.shape.center_groups = b.center_groups;
  r.shape.edge_groups = b.edge_groups;
  fit_capacity(b, expected);
  r.capacity = expected;
  auto padded = std::make_shared<BatchTensors>();
  pad_batch(b, expected, pad_length, *padded);
  if (device.is_cuda())
    for (auto member : BatchTensors::kTensors)
      if ((padded.get()->*member).defined()) padded.get()->*member = (padded.get()->*member).pin_memory();
  r.fill = [b, padded, expected, pad_length, device](const BatchCapacity& cap, BatchTensors& into) {
    if (!(cap == expected)) {
      pad_batch(to_device(b, device), cap, pad_length, into);
      return;
    }
    set_padded_shape(cap, torch::TensorOptions().dtype(torch::kInt64).device(device), into);
    for (auto member : BatchTensors::kTensors) {
      const torch::Tensor& from = padded.get()->*member;
      if (member == &BatchTensors::species || member == &BatchTensors::head || !from.defined()) continue;
      ensure_shape(into.*member, from.sizes(), from.options().device(device).pinned_memory(false));
      (into.*member).copy_(from, /*non_blocking=*/true);
    }
  };
  return r;
}

double ema_decay_at(double decay, int64_t n) {
  return std::min(decay, (1.0 + static_cast<double>(n)) / (10.0 + static_cast<double>(n)));
}

// ema += (1 - decay) (p - ema): a parameter that does not move leaves its average as it is.
void update_ema(std::vector<torch::Tensor>& ema, const std::vector<torch::Tensor>& params, double decay) {
  if (ema.empty()) return;
  torch::NoGradGuard no_grad;  // EMA update: three kernels for all parameters on a GPU
  std::vector<torch::Tensor> step = at::_foreach_sub(params, ema);
  at::_foreach_mul_(step, 1.0 - decay);
  at::_foreach_add_(ema, step);
}

void update_ema(std::vector<torch::Tensor>& ema, const std::vector<torch::Tensor>& params, const torch::Tensor& weight) {
  if (ema.empty()) return;
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> step = at::_foreach_sub(params, ema);
  at::_foreach_mul_(step, weight.to(ema.front().scalar_type()));
  at::_foreach_add_(ema, step);
}

RecordedStep::RecordedStep(StepParts parts, bool record, const torch::Device& device) : parts_(std::move(parts)) {
  if (record) {
    if (!device.is_cuda())
      throw Error("training.cuda_graph: true records the training step as a CUDA graph, which needs a GPU (training.device "
                  "gave the CPU); eager runs the same step unrecorded");
    if (const std::string why = parts_.comm->size() > 1 ? parts_.comm->unrecordable() : ""; !why.empty())
      throw Error("training.cuda_graph: true on " + std::to_string(parts_.comm->size()) + " ranks sums the gradients "
                  "inside the recorded step, which needs NCCL 2.9.6 or later (one GPU per rank); " + why +
                  " (eager runs the same step unrecorded)");
    recorder_ = std::make_unique<detail::CudaGraphRecorder>(device.index());
  }
  const torch::TensorOptions f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device);
  // One block, written by one copy a step: prefactors (3), normaliser, frames, the EMA's 1 - decay.
  weight_block_ = torch::zeros({6}, f64);
  weights_.prefactors = weight_block_.narrow(0, 0, 3);
  weights_.normalizer = weight_block_.select(0, 3);
  weights_.frames = weight_block_.select(0, 4);
  // ATen's fused Adam reads a learning rate on a GPU as float32 (rounded: 6e-8 relative); on the
  // CPU it takes the number.
  lr_ = torch::zeros({}, f64.dtype(device.is_cuda() ? torch::kFloat32 : torch::kFloat64));
}

RecordedStep::~RecordedStep() = default;

// The step on input_: its MetricSums terms; unless a warm-up, the gradients set, summed over the
// ranks and clipped, and the optimiser's and the EMA's steps taken. What changes from step to step
// reaches a recording through tensors filled before each replay (the learning rate lr_, the loss
// weights and the EMA's decay in weight_block_, Adam's step counts); the numbers passed here as
// doubles (huber_delta, grad_clip, Adam's betas) are the recording's for good: none of them may get
// a schedule unless it becomes such a tensor.
void RecordedStep::run(Run how) {
  // The batch's indices are made by the trainer and pad_batch: the operators' index checks (a read
  // back each, which a recording cannot hold) are off, and their formulations those a recording
  // takes, in warm-up runs and eager steps alike (`eager` runs the recorded step unrecorded).
  const DeviceWorkRecorded as_recorded;
  RecordableScope recordable("training.cuda_graph: the recorded training step");
  std::vector<torch::Tensor>& params = *parts_.params;
  const Prediction p = predict(*parts_.module, input_, /*create_graph=*/true, parts_.accumulate, parts_.without_prior);
  torch::Tensor terms;
  const torch::Tensor loss = loss_terms(p, input_, weights_, parts_.loss, parts_.huber_delta, &terms);
  const auto grads = torch::autograd::grad({loss}, params, {}, /*retain_graph=*/false, /*create_graph=*/false,
                                           /*allow_unused=*/true);
  if (how == Run::warm) return recordable.done();
  terms_ = terms;
  set_gradients(params, grads);
  parts_.reducer->reduce(*parts_.comm);   // one rank: only the gradients of unused parameters made zeros
  if (parts_.grad_clip > 0) parts_.reducer->clip_norm(parts_.grad_clip);
  // In a recording there is nothing to make (record() made it): what would be made here would be
  // made anew at every replay.
  if (parts_.adam->sync_counts() && how == Run::capture)
    throw Error("training.cuda_graph: the optimiser's state was made inside a recording (an internal error)");
  parts_.adam->launch(&lr_);
  if (!parts_.ema->empty()) update_ema(*parts_.ema, params, weight_block_.select(0, 5));
  recordable.done();
}

// The update half of the step (the gradient sum, clipping, Adam, EMA) run once eagerly and undone,
// before the first recording: its kernels, and NCCL's connections, are then set up outside the
// recording. All ranks record their first step together (every rank takes it, on an empty batch
// where it has no frames), so the sum's collectives match; later recordings (the ranks' agreed
// capacity grown: all ranks together) run no warm-up collective.
void RecordedStep::warm_update() {
  for (torch::Tensor& p : *parts_.params)
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  parts_.adam->sync_counts();   // the state to keep exists before the step
  std::vector<torch::Tensor> kept = *parts_.params;
  for (const torch::Tensor& t : parts_.adam->state_tensors()) kept.push_back(t);
  for (const torch::Tensor& t : *parts_.ema) kept.push_back(t);
  std::vector<torch::Tensor> saved;
  for (const torch::Tensor& t : kept) saved.push_back(t.detach().clone());
  run(Run::eager);
  torch::NoGradGuard no_grad;  // restoring the state
  for (std::size_t i = 0; i < kept.size(); ++i) kept[i].copy_(saved[i]);
  warmed_ = true;
}

// The step recorded for the current capacity: warm-up runs without the updates, then the
// recording (which computes nothing: the replay that follows takes the step).
void RecordedStep::record() {
  recorded_ = false;
  recorder_->drop();
  // The optimiser's state and the gradients' places exist before the recording, so that nothing
  // it replays starts from zeros allocated inside it; the old recording's outputs go, so that its
  // memory can.
  terms_ = torch::Tensor();
  for (torch::Tensor& p : *parts_.params) p.mutable_grad() = torch::zeros_like(p);
  parts_.adam->sync_counts();
  try {
    if (!warmed_) warm_update();
    recorder_->record([this] { run(Run::warm); }, [this] { run(Run::capture); });
  } catch (const std::exception& e) {   // mlip's, or LibTorch's (out of memory, a wait inside the capture)
    const auto* torch_error = dynamic_cast<const c10::Error*>(&e);
    // ATen's deterministic index_add (an index_put_ with a sort) checks its indices; LibTorch
    // builds whose check reads them back to the host cannot record it.
    const std::string deterministic = at::globalContext().deterministicAlgorithms()
                                          ? " (or training.deterministic false, whose index_add neither sorts nor checks "
                                            "its indices; some LibTorch builds read that check back, which a recording "
                                            "cannot hold)"
                                          : "";
    throw Error(std::string("training.cuda_graph true: the training step could not be recorded as a CUDA graph (") +
                (torch_error ? torch_error->what_without_backtrace() : e.what()) +
                "); training.cuda_graph false trains without recording it" + deterministic);
  }
  recorded_ = true;
  ++recordings_;
}

void set_gradients(std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads) {
  std::unordered_set<const void*> taken;
  for (std::size_t i = 0; i < params.size(); ++i) {
    torch::Tensor g = FusedAdam::laid_out_as(grads[i], params[i]);
    if (g.defined() && !taken.insert(g.data_ptr()).second) g = g.clone();
    params[i].mutable_grad() = g;
  }
}

std::vector<const void*> RecordedStep::input_addresses() const {
  std::vector<const void*> at;
  for (auto member : BatchTensors::kTensors) at.push_back((input_.*member).defined() ? (input_.*member).data_ptr() : nullptr);
  return at;
}

void RecordedStep::reserve(const BatchCapacity& at_least) {
  BatchCapacity c = capacity_;
  raise_capacity(c, at_least);
  if (c == capacity_) return;
  capacity_ = std::move(c);
  recorded_ = inputs_made_ = false;
}

bool RecordedStep::fits(const BatchTensors& b) const {
  BatchCapacity c = capacity_;
  return !fit_capacity(b, c);
}

torch::Tensor RecordedStep::step(const BatchTensors& shape, const FillInputs& fill, const Prefactors& pre, double normalizer,
                                 double frames, double lr, double ema_decay) {
  if (fit_capacity(shape, capacity_)) recorded_ = inputs_made_ = false;
  const std::vector<const void*> made_at = inputs_made_ ? input_addresses() : std::vector<const void*>();
  fill(capacity_, input_);
  // A recording reads its inputs where they were when it was made: a fill that made one anew at
  // the same capacity (another shape or dtype) would have it read freed memory. Checked eager too.
  if (inputs_made_ && input_addresses() != made_at)
    throw Error("training.cuda_graph: a batch's tensors were made anew at the same capacity, where a recording reads "
                "them (a defect of mlip; training.cuda_graph false trains without recording)");
  inputs_made_ = true;
  {
    torch::NoGradGuard no_grad;  // the inputs of the step
    const torch::Tensor host = torch::empty(
        {6}, torch::TensorOptions().dtype(torch::kFloat64).pinned_memory(weight_block_.is_cuda()));
    double* w = host.data_ptr<double>();
    w[0] = pre.energy;
    w[1] = pre.forces;
    w[2] = pre.virial;
    w[3] = normalizer;
    w[4] = frames;
    w[5] = 1.0 - ema_decay;
    weight_block_.copy_(host, /*non_blocking=*/true);
    lr_.fill_(lr);
  }
  if (!recorder_) {
    if (!warmed_) warm_update();   // as before a first recording (so that the CPU tests check it undone)
    run(Run::eager);
    parts_.adam->advance();
    return terms_;
  }
  if (!recorded_) record();
  recorder_->replay_now();
  bound_replays_ahead();
  parts_.adam->advance();
  return terms_;
}

// The host waits for the replay kReplaysAhead steps back before it goes on: at most that many
// are queued, with their batches' pinned blocks.
void RecordedStep::bound_replays_ahead() {
  const torch::Device device = weight_block_.device();
  replays_.emplace_back(device.type());
  replays_.back().record(c10::impl::getDeviceGuardImpl(device.type())->getStream(device));
  if (replays_.size() <= kReplaysAhead) return;
  replays_.front().synchronize();
  replays_.pop_front();
}

}  // namespace mlip::trainer
