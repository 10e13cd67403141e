// A training step recorded once as a CUDA graph and replayed for every batch (training.cuda_graph):
// one launch for the forward pass, the forces (the double backward), the loss, the parameter
// gradients, their clipping, the fused Adam step and the EMA, instead of the thousands of kernel
// launches and their host-side dispatch that bind batch-1 training on a GPU.
//
// A graph needs static shapes, so each batch, grouped for forward_grouped() (group_batch), is
// padded to a capacity (BatchCapacity) and copied into the recorded step's inputs:
//   - atoms: each species' group padded with atoms of that species that have no real edges, in a
//     padding frame of their own, unlabelled;
//   - edges: each embedding net's group padded with edges from a padding atom to itself beyond
//     the cutoff (rule.pad_length), where every term of se_e2_a and its derivatives is exactly
//     zero, the padding atoms in turn (padding_edge_ends(): on a GPU, one atom's sums would take
//     them one after another);
//   - frames: padded with frames of weight zero and no labels (the last frame is padding's).
// Capacities follow the grouped graph's rule (mlip/model/grouped_graph.h: the size plus 10%,
// rounded up to 32; frames: one more than seen, plus 10%, rounded up to 8: batches by atoms vary
// in frames), grow where a batch outgrows them and never
// shrink; each growth records the step anew. The loss weights and the learning rate are inputs
// too (LossWeights), so a schedule needs no new recording. The batch's MetricSums come back as a
// tensor on the device, as the plain step's do.
//
// With several ranks the gradients are summed inside the step (GradientReducer: NCCL's all-reduce
// is recorded on the step's stream; a host communicator cannot be recorded), and a rank with no
// frames in a batch takes the step on an empty batch (all padding: zero gradients), so that every
// rank replays the same collectives. Not with accumulate > 1 or models without forward_grouped():
// the trainer refuses them. With `record` false the same padded step runs eagerly, on any device:
// the code path the CPU tests check.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <c10/core/Event.h>

#include "fused_adam.h"
#include "gradient_reducer.h"
#include "training.h"

namespace mlip::detail {
struct CudaGraphRecorder;
}

namespace mlip::trainer {

/// The padded sizes of a recorded step's batch.
struct BatchCapacity {
  int64_t frames = 0;                    // the last one holds the padding atoms
  std::vector<int64_t> centers, edges;   // per species; per embedding net
  bool virial = false;                   // virials computed (once a batch had a virial label)
  bool operator==(const BatchCapacity& o) const {
    return frames == o.frames && centers == o.centers && edges == o.edges && virial == o.virial;
  }
  int64_t atoms() const;
  int64_t n_edges() const;
};

/// Centre groups of equal sizes let se_e2_a's fitting nets run as one batched product a layer for
/// every species (its energies_grouped()): fewer kernels in a batch of few atoms. Where the groups
/// made equal hold at most this many padding atoms beyond the batch's own (products of so few rows
/// take a GPU the same time), every group of centres takes the largest one's capacity.
constexpr int64_t kEqualCenterGroupsSlack = 1024;

/// Grows `cap` where the grouped batch `b` outgrows it (each species' group of atoms keeps a free
/// slot; groups made equal within kEqualCenterGroupsSlack). Returns whether it changed.
bool fit_capacity(const BatchTensors& b, BatchCapacity& cap);

/// The capacity the ranks agreed on last (largest_over_ranks), shared with the prefetching thread,
/// which pads the batches it makes ready for it.
class AgreedCapacity {
 public:
  void set(const BatchCapacity& c) {
    const std::lock_guard<std::mutex> lock(mutex_);
    capacity_ = c;
  }
  BatchCapacity get() const {
    const std::lock_guard<std::mutex> lock(mutex_);
    return capacity_;
  }

 private:
  mutable std::mutex mutex_;
  BatchCapacity capacity_;
};

/// Raises each of `cap`'s entries to at least `at_least`'s (frames, each group, virials).
void raise_capacity(BatchCapacity& cap, const BatchCapacity& at_least);

/// Throws mlip::Error on every rank unless every rank groups its batches into as many groups
/// (`centers` species, `edges` nets), which largest_over_ranks takes for granted: one host
/// all-reduce, once at setup.
void check_groups_agree(Communicator& comm, std::size_t centers, std::size_t edges);

/// The largest of the ranks' capacities, entry by entry (frames, each group, virials), on every
/// rank: one host all-reduce of a few numbers. Every rank's groups must be as many
/// (check_groups_agree).
BatchCapacity largest_over_ranks(Communicator& comm, const BatchCapacity& mine);

/// The grouped batch `b` (group_batch) padded to `cap` (which it fits), written into `into`'s
/// tensors on b's device (made, or made anew, where their shapes differ), with no size read from
/// the device. Padding edges are `pad_length` long.
void pad_batch(const BatchTensors& b, const BatchCapacity& cap, double pad_length, BatchTensors& into);

/// `into`'s sizes and groups set to `cap`'s, and its species (each species' slots, made anew where
/// the atoms' count or device changed); the other tensors are pad_batch's or FrameBank's to write.
void set_padded_shape(const BatchCapacity& cap, const torch::TensorOptions& i64, BatchTensors& into);

/// `to` made anew unless it already has this shape, dtype and device.
void ensure_shape(torch::Tensor& to, at::IntArrayRef shape, const torch::TensorOptions& o);

/// Writes a padded batch for a capacity into the recorded step's inputs.
using FillInputs = std::function<void(const BatchCapacity& cap, BatchTensors& into)>;

/// A batch made ready for the recorded step ahead of it (in the prefetching thread): its grouped
/// sizes (no tensors), the capacity it was made ready for, and what writes it into the step's
/// inputs for that capacity (cheaply) or any other (the step's capacity can differ from the one
/// foreseen, e.g. after a rank's empty batch).
struct ReadyBatch {
  BatchTensors shape;
  BatchCapacity capacity;
  FillInputs fill;
};

/// The grouped host batch `b` padded on the host for `expected` grown by it (fit_capacity), in
/// pinned memory where `device` is a GPU: its fill copies the padded tensors to the inputs on
/// `device` (one copy each, no kernel), or pads `b` there for another capacity.
ReadyBatch ready_on_host(const BatchTensors& b, BatchCapacity expected, double pad_length, const torch::Device& device);

/// What a training step updates, and how (the trainer's own parts).
struct StepParts {
  torch::jit::Module* module = nullptr;
  std::vector<torch::Tensor>* params = nullptr;
  FusedAdam* adam = nullptr;
  GradientReducer* reducer = nullptr;
  Communicator* comm = nullptr;                // the gradients summed over its ranks
  double grad_clip = 0;                        // > 0: the global gradient norm clipped to it
  std::vector<torch::Tensor>* ema = nullptr;   // empty: no EMA
  torch::Dtype accumulate = torch::kFloat64;
  std::string loss = "mse";
  double huber_delta = 0;
  GroupingRule rule;
  bool without_prior = false;                  // the model without its prior (prior_is_zero_on())
};

/// Each parameter's .grad set to its gradient in `grads` (autograd::grad's, in the parameters'
/// order), laid out as the parameter, and its own: autograd may give two parameters one tensor (a
/// sum's backward passes its gradient on to each term), which clipping, an in-place scaling of
/// each, would then scale twice.
void set_gradients(std::vector<torch::Tensor>& params, const std::vector<torch::Tensor>& grads);

/// The EMA's decay at its update `n` (0 the first): min(decay, (1 + n) / (10 + n)), the warm-up of
/// torch_ema and TensorFlow's moving averages, so that the average forgets the initial weights in
/// runs of few steps (0.99 held 40% of them after 90 steps, 16% after 180).
double ema_decay_at(double decay, int64_t n);

/// The parameters' exponential moving average: ema = decay ema + (1 - decay) p, on their device,
/// as ema + (1 - decay) (p - ema) (a parameter that does not move keeps its average exactly).
void update_ema(std::vector<torch::Tensor>& ema, const std::vector<torch::Tensor>& params, double decay);
/// The same with 1 - decay read from `weight` (a scalar on the parameters' device), as a recording
/// takes it: each replay's filled in before it.
void update_ema(std::vector<torch::Tensor>& ema, const std::vector<torch::Tensor>& params, const torch::Tensor& weight);

class RecordedStep {
 public:
  /// With `record`, on a GPU (libmlip_cuda_graph.so loaded: throws mlip::Error naming why not).
  RecordedStep(StepParts parts, bool record, const torch::Device& device);
  ~RecordedStep();
  RecordedStep(const RecordedStep&) = delete;
  RecordedStep& operator=(const RecordedStep&) = delete;

  /// One optimiser step on the batch whose grouped sizes `shape` gives (group sizes, frames,
  /// virials), which `fill` writes padded to the step's capacity (ReadyBatch), with these weights
  /// learning rate and EMA decay (ema_decay_at); returns the batch's MetricSums terms (8, float64, on the device; valid
  /// until the next step).
  torch::Tensor step(const BatchTensors& shape, const FillInputs& fill, const Prefactors& pre, double normalizer,
                     double frames, double lr, double ema_decay);

  /// Grows the capacity to at least `at_least` (raise_capacity: the ranks' agreed one, so that they
  /// record anew together): the next step records anew if it grew.
  void reserve(const BatchCapacity& at_least);

  int64_t recordings() const { return recordings_; }
  const BatchCapacity& capacity() const { return capacity_; }
  bool recording() const { return recorder_ != nullptr; }
  /// Whether `b` (grouped) fits the current capacities (else the next step records anew).
  bool fits(const BatchTensors& b) const;

 private:
  // warm: the step without its lasting effects (a warm-up before a recording); capture: recorded;
  // eager: run as it is.
  enum class Run { warm, capture, eager };
  void run(Run how);
  void record();
  void warm_update();
  std::vector<const void*> input_addresses() const;   // input_'s tensors' data (null: undefined)
  void bound_replays_ahead();

  /// The most replays the host queues ahead of the GPU: each holds its batch's pinned host blocks
  /// (LibTorch's host allocator keeps them until their copies ran), which would otherwise grow with
  /// every step the host is ahead, up to the driver's queue (many hundreds). A few keep the GPU fed
  /// (the host's part of a recorded step is far shorter than a replay).
  static constexpr std::size_t kReplaysAhead = 3;

  StepParts parts_;
  std::unique_ptr<detail::CudaGraphRecorder> recorder_;   // null: eager
  std::deque<c10::Event> replays_;                        // each queued replay's end, oldest first
  BatchCapacity capacity_;
  BatchTensors input_;
  LossWeights weights_;                  // views of weight_block_
  torch::Tensor weight_block_;
  torch::Tensor lr_, terms_;
  int64_t recordings_ = 0;
  bool recorded_ = false;
  bool inputs_made_ = false;             // input_ filled at capacity_ (its tensors stay where they are)
  bool warmed_ = false;                  // warm_update() done
};

}  // namespace mlip::trainer
