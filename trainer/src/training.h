// The parts of a training run: data split and sampling, statistics, loss, schedules,
// checkpoints, and the Trainer that ties them together.
#pragma once

#include <algorithm>
#include <array>
#include <chrono>
#include <filesystem>
#include <functional>
#include <cstdint>
#include <memory>
#include <optional>
#include <limits>
#include <string>
#include <vector>

#include <torch/script.h>
#include <torch/optim.h>

#include "communicator.h"
#include "step_clock.h"
#include "config.h"
#include "frame_source.h"
#include "fused_adam.h"
#include "gradient_reducer.h"
#include "mlip/data/dataset.h"
#include "mlip/model/grouped_graph.h"
#include "mlip/model/kernel_profile.h"
#include "mlip/ops/operators.h"
#include "mlip/potentials.h"
#include "permutation.h"

namespace mlip::trainer {

struct BatchTensors;
template <class Batch> class Prefetcher;
using BatchPrefetcher = Prefetcher<BatchTensors>;
class FrameBank;
struct BatchCapacity;
class AgreedCapacity;
struct ReadyBatch;
class RecordedStep;

// ---------------------------------------------------------------------------------------------
// Data
// ---------------------------------------------------------------------------------------------

struct DataSplit {
  std::shared_ptr<FrameSource> train;
  std::shared_ptr<FrameSource> validation;
};

/// One source's frames, for `cutoff`: a pack streamed (its elements checked against
/// `model_species`, naming the pack); extended XYZ and ASE databases streamed by index when the
/// source says `stream: true` (or, unset, `stream_by_default`); else parsed into memory through
/// the cache in `cache_dir` ("": none). The source's weight applied; `log` gets a line saying which.
std::shared_ptr<FrameSource> open_source(const DataSource& source, double cutoff, const std::string& cache_dir,
                                         const std::vector<std::string>& model_species,
                                         const std::function<void(const std::string&)>& log, bool stream_by_default);

/// Every source: packs streamed, other formats parsed into memory (through the cache); source
/// weights applied; validation frames split off by fraction with `split_seed` (as indices) unless
/// validation sources are given. `log` gets one line per source.
DataSplit load_data(const Config& config, const std::function<void(const std::string&)>& log);

/// The global batches of one epoch, with no list of frames: batch k is frames order(start(k)),
/// ..., order(start(k + 1) - 1), `order` being the epoch's permutation. By frame count the starts
/// are computed (no memory per frame); by atoms they are listed (8 bytes a batch).
struct EpochBatches {
  Permutation order;
  int64_t batch_frames = 0;      // > 0: batches of this many frames; 0: `starts` lists them
  std::vector<int64_t> starts;   // by atoms: size() + 1 entries
  std::size_t size() const;
  int64_t start(std::size_t k) const;
  int64_t frames(std::size_t k) const { return start(k + 1) - start(k); }
  /// The items of batch k that `rank` of `n_ranks` evaluates: its j-th with j % n_ranks == rank.
  std::vector<int64_t> share(std::size_t k, int rank, int n_ranks) const;
};

/// Batches of one epoch. The global order is a permutation seeded by (seed, epoch), identical on
/// every rank; a global batch holds `batch_frames` frames (or frames up to `batch_atoms` atoms),
/// and rank r evaluates its items j with j % size == r. So N ranks and 1 rank see the same global
/// batches, and every frame is used once per epoch.
class Sampler {
 public:
  /// By atoms, each epoch's pass looks up the frames' atom counts on `threads` threads.
  Sampler(const FrameSource& frames, int64_t batch_frames, int64_t batch_atoms, uint64_t seed, int threads = 1);
  /// Global batches of `epoch` (frame indices). By atoms, one pass over the epoch's order.
  EpochBatches epoch_batches(int64_t epoch) const;
  /// By atoms: epoch 0's number of batches (the count depends on the order), found once; the
  /// batches found for it are kept for the first epoch_batches(0), so that a run starts with one
  /// pass over the frames, not two. Both keep state: call them from one thread.
  int64_t batches_per_epoch() const;

 private:
  const FrameSource& frames_;
  int64_t batch_frames_, batch_atoms_;
  uint64_t seed_;
  int threads_;
  mutable std::optional<int64_t> count_;
  mutable std::optional<EpochBatches> epoch0_;
};


// ---------------------------------------------------------------------------------------------
// Statistics
// ---------------------------------------------------------------------------------------------

/// Per-species energy shifts: least squares of frame energies on species counts, from the
/// normal equations in `stats` (minimum-norm when counts are collinear, as in water where only the
/// sum over O + 2H is determined). Throws naming the element if the data has one `species` lacks.
std::vector<double> fit_energy_shift(const PackStats& stats, const SpeciesMap& species, std::size_t n_species);

/// x of the least-squares problem whose normal equations are a x = b (float64, (n, n) and (n)):
/// the minimum-norm solution where a is singular (collinear counts), through gelsd (SVD).
std::vector<double> min_norm_solution(const torch::Tensor& a, const torch::Tensor& b);

/// Adds a batch's normal equations of the energy shift's correction to a (heads, ns, ns) and b
/// (heads, ns), float64 on the batch's device: per frame with an energy, its species counts n and
/// the residual r = E - `predicted` (eV), weighted per atom as the loss is (w / N^2, w the frame's
/// weight), into its head's (the first without heads): a += w n n^T, b += w r n.
void add_shift_equations(const BatchTensors& batch, const torch::Tensor& predicted, torch::Tensor& a, torch::Tensor& b);

/// RMS of all force components (eV/Å); 0 if no frame has forces.
double force_rms(const PackStats& stats);

/// The shortest distance between atoms of species a and b (index a * n + b), below `cutoff`;
/// +inf where none is.
std::vector<double> shortest_by_species(const PackStats& stats, const SpeciesMap& species, std::size_t n_species,
                                        double cutoff);

// ---------------------------------------------------------------------------------------------
// Predictions and loss
// ---------------------------------------------------------------------------------------------

/// A GraphBatch as tensors: edge vectors in the model's dtype, labels in float64.
/// A batch's atoms per species and edges per (centre species, neighbour species) pair, counted on
/// the host when its tensors are made, so that grouping it (group_batch) needs no size from the
/// device.
struct GroupCounts {
  int64_t n_species = 0;                 // the highest species index counted, plus one
  std::vector<int64_t> species, pairs;   // (n_species); (n_species x n_species) row-major: centre, neighbour
  void add(const GroupCounts& o);
};

struct BatchTensors {
  int64_t n_frames = 0, n_atoms = 0;
  GroupCounts counts;
  // Set by group_batch(): atoms grouped by species, edges by embedding net (sizes of each group),
  // for the model's forward_grouped(); empty: the batch as it was made.
  std::vector<int64_t> center_groups, edge_groups;
  torch::Tensor species, edge_index, edge_vectors, frame_of_atom, frame_of_edge, atoms_per_frame;
  torch::Tensor energy, has_energy, forces, has_forces_atom, virial, has_virial, weight;
  torch::Tensor head;       // (n_atoms) int64, each atom's frame's head; undefined: the model's default
  bool any_virial = false;  // some frame has a virial label

  /// Every tensor above, for what treats them alike (to_device, concat; undefined ones skipped).
  static constexpr std::array<torch::Tensor BatchTensors::*, 14> kTensors = {
      &BatchTensors::species, &BatchTensors::edge_index,      &BatchTensors::edge_vectors, &BatchTensors::frame_of_atom,
      &BatchTensors::frame_of_edge, &BatchTensors::atoms_per_frame, &BatchTensors::energy, &BatchTensors::has_energy,
      &BatchTensors::forces, &BatchTensors::has_forces_atom, &BatchTensors::virial, &BatchTensors::has_virial,
      &BatchTensors::weight, &BatchTensors::head};
};
BatchTensors to_tensors(const GraphBatch& b, torch::Dtype dtype);

/// The same batch with every tensor on `device` (non-blocking from pinned host memory).
BatchTensors to_device(const BatchTensors& b, const torch::Device& device);

/// Several batches as one, on their device: what to_tensors(make_batch(all frames)) gives, made
/// from per-frame tensors that stay on the device (training.data_on_device), with no host copy.
BatchTensors concat(const std::vector<const BatchTensors*>& parts);

/// The same batch reordered for a model's forward_grouped() (mlip/model/grouped_graph.h), on its
/// device and with no size read from it: atoms grouped by species (in their order within one),
/// edges grouped by embedding net (the neighbour's species, or with rule.pair_nets the pair's) and by
/// centre within a net, labels and frame indices with them. The same energies, forces and loss up
/// to rounding; forces come in the new atom order, as the labels do. Throws mlip::Error for a
/// species index outside the rule's.
BatchTensors group_batch(const BatchTensors& b, const GroupingRule& rule);

struct Prediction {
  torch::Tensor energy;  // (n_frames)
  torch::Tensor forces;  // (n_atoms, 3)
  torch::Tensor virial;  // (n_frames, 9)
};

/// Energies, forces and virials of a batch; `create_graph` keeps the graph for a training step.
/// Virials are computed only when some frame of the batch has one to compare with (else zeros).
/// Per-atom energies and edge gradients are summed into frame energies, forces and virials in
/// `accumulate` (training.accumulate_dtype; float32 rounds a float64 model's outputs too).
/// `without_prior`: a grouped batch through forward_grouped_learned() (prior_is_zero_on()).
Prediction predict(torch::jit::Module& module, const BatchTensors& b, bool create_graph,
                   torch::Dtype accumulate = torch::kFloat64, bool without_prior = false);
/// Whether `module`'s parameter-free prior (the repulsion: potentials/src/repulsion.cpp) is zero on
/// every training edge, so that grouped steps may leave it out (forward_grouped_learned(), which the
/// module must have): each species pair's inner radius is at most the pair's shortest training
/// distance (`shortest`, ns x ns, infinite where no edge; within a relative 1e-6, the rounding of a
/// float32 model's radii, where the prior's switch is below 1e-15). fit_repulsion sets the radii so
/// on the same data; a fine-tuning's, from another data set, may be larger.
bool prior_is_zero_on(torch::jit::Module& module, const std::vector<double>& shortest);
/// The frame energies of a batch alone (no forces), in `accumulate`, detached.
torch::Tensor predict_energy(torch::jit::Module& module, const BatchTensors& b, torch::Dtype accumulate);

struct Prefactors {
  double energy = 1, forces = 1, virial = 0;
};

/// Sums for exact RMSEs across ranks and batches.
struct MetricSums {
  double energy_sq = 0, energy_n = 0;   // (dE / N)^2 per frame
  double forces_sq = 0, forces_n = 0;   // dF^2 per component
  double virial_sq = 0, virial_n = 0;   // (dW / N)^2 per component
  double loss = 0, frames = 0;
  void add(const MetricSums& o);
  std::vector<double> pack() const;
  void unpack(const std::vector<double>& v);
  // NaN where no frame had that label (printed "n/a"; never 0).
  double energy_rmse() const { return energy_n > 0 ? std::sqrt(energy_sq / energy_n) : kNoLabel; }
  double forces_rmse() const { return forces_n > 0 ? std::sqrt(forces_sq / forces_n) : kNoLabel; }
  double virial_rmse() const { return virial_n > 0 ? std::sqrt(virial_sq / virial_n) : kNoLabel; }
  static constexpr double kNoLabel = std::numeric_limits<double>::quiet_NaN();
};

/// MetricSums summed where the model runs: each batch's terms are added there and nothing is read
/// back until read() (a progress line, a checkpoint, the epoch's end), so that a training step
/// does not wait for the GPU. The same sums, added in the same order, as MetricSums::add() of each
/// batch's on the host after `start`.
class MetricTotals {
 public:
  explicit MetricTotals(const MetricSums& start = {}) : start_(start) {}
  /// A batch's sums: (8) float64 in MetricSums::pack()'s order.
  void add(const torch::Tensor& terms);
  /// All so far (one copy back).
  MetricSums read() const;

 private:
  MetricSums start_;
  torch::Tensor sums_;
};

/// The batch with only the frames of `head` labelled and weighted (a multi-head model's batch;
/// the other frames stay, masked): loss_terms() of it gives that head's errors.
BatchTensors frames_of_head(const BatchTensors& b, int64_t head);

/// `value` (eV...) in milli-units with `decimals`, or "n/a" for a metric without labels (NaN).
std::string milli(double value, int decimals);

/// sum_frames w_f (p_E l(dE/N) + p_F mean l(dF) + p_V mean l(dW/N)) / normalizer, with l the
/// squared error or the Huber function; frames without a label contribute nothing to that term.
/// Computed in the prediction's dtype; `sums` costs one device-to-host copy, `totals` none.
torch::Tensor loss_terms(const Prediction& p, const BatchTensors& b, const Prefactors& pre, const std::string& kind,
                         double huber_delta, double normalizer, MetricSums* sums, MetricTotals* totals = nullptr);

/// A step's loss weights as 0-dim float64 tensors on the device, so that a recorded training step
/// (recorded_step.h) takes them as inputs: the prefactors (3: energy, forces, virial), the
/// normaliser, and the frames the batch holds (its padding frames not counted).
struct LossWeights {
  torch::Tensor prefactors, normalizer, frames;
};

/// loss_terms() with weights on the device, reading nothing from it: `terms`, when given, gets the
/// batch's MetricSums in pack()'s order (8, float64, on the device).
torch::Tensor loss_terms(const Prediction& p, const BatchTensors& b, const LossWeights& w, const std::string& kind,
                         double huber_delta, torch::Tensor* terms);

// ---------------------------------------------------------------------------------------------
// Schedules
// ---------------------------------------------------------------------------------------------

class Schedule {
 public:
  Schedule(const Config& c, int64_t total_steps);
  double lr(int64_t step) const;
  Prefactors prefactors(int64_t step) const;  // DeePMD: limit + (start - limit) lr / lr0
  Prefactors limits() const;

  /// Reduce-on-plateau ("plateau"): called with each epoch's validation metric; multiplies the
  /// learning rate by `factor` after more than `patience` epochs without a relative improvement
  /// of `threshold`, down to `final_lr`. Returns true when it reduced. Other types ignore it.
  bool end_epoch(double metric);
  /// With training.max_minutes, the fraction of that time used so far: exponential and cosine
  /// schedules then run on max(step / total steps, time fraction), so that they reach final_lr
  /// when the time is up rather than at an epoch count the time never allows.
  void set_time_fraction(double f) { time_fraction_ = f; }
  /// The plateau state, saved in checkpoints so that a resumed run continues exactly.
  nlohmann::json state() const;
  void restore(const nlohmann::json& state);

 private:
  ScheduleConfig cfg_;
  double lr0_;
  int64_t total_;
  PrefactorConfig e_, f_, v_;
  double time_fraction_ = 0.0;
  double plateau_scale_ = 1.0, plateau_best_ = std::numeric_limits<double>::infinity();
  int64_t plateau_bad_epochs_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Trainer
// ---------------------------------------------------------------------------------------------

/// Where the time of training steps goes, summed over an epoch on this rank.
struct StepTimes {
  double data = 0;           // batching, tensors
  double model = 0;          // forward, forces (double backward graph), backward
  double communication = 0;  // gradient all-reduce
  double optimizer = 0;      // clipping, optimiser, EMA
  double wall = 0;           // the whole epoch's training loop, everything included
  double total() const { return data + model + communication + optimizer; }
  /// Loop overhead, logging and everything else not timed above.
  double other() const { return std::max(0.0, wall - total()); }
};

struct TrainState {
  int64_t epoch = 0;          // epochs completed
  int64_t step = 0;           // optimiser steps taken
  double best_metric = 1e300;
  int64_t best_epoch = -1;
  int64_t epochs_without_improvement = 0;
  double elapsed_seconds = 0;
  int64_t epoch_step = 0;            // steps of the current epoch taken (a checkpoint inside an epoch)
  std::vector<double> epoch_sums;    // its training sums so far (MetricSums::pack), reduced over ranks
};

class Trainer {
 public:
  Trainer(Config config, std::string config_text, Communicator& comm);
  ~Trainer();
  /// Trains from scratch, or from the latest checkpoint in output.dir when `resume`. With
  /// `stop_after_epochs` > 0 the run ends after that many epochs (for job-chunked clusters: the
  /// schedule still spans training.epochs, and --resume continues exactly).
  void run(bool resume, int64_t stop_after_epochs = 0);
  /// Profiles `steps` optimiser steps of this run after its first two (LibTorch's profiler, rank 0;
  /// --profile N) and logs where they spent their time (mlip/model/kernel_profile.h).
  void profile_steps(int64_t steps) { profile_steps_ = steps; }

  // Pieces used by tests.
  MetricSums validate();
  std::vector<MetricSums> validation_by_head_;   // a multi-head model's last validation, per head
  const std::vector<torch::Tensor>& parameters() const { return params_; }
  const TrainState& state() const { return state_; }
  const StepTimes& last_epoch_times() const { return times_; }
  BuiltModel& model() { return model_; }
  const torch::Device& device() const { return device_; }
  /// training.cuda_graph: the recorded step's capacities (nullptr without it).
  const BatchCapacity* step_capacity() const;

 private:
  void setup_device();
  void setup_model_and_statistics();
  // A batch evaluated outside the training step (validation, the energy shift's re-fit) grouped as
  // the training batches are (training.grouped, training.cuda_graph: no read back for sizes),
  // unless it was grouped where it was built; the operators' index checks off while `trusted`
  // lives (the trainer made its indices).
  void group_as_training(BatchTensors& t, std::optional<DeviceValueChecksPaused>& trusted) const;
  // Fine-tuning (fine_tuning.cpp): training.init_from's weights, the energy shift re-fitted to
  // what the model leaves unexplained on training frames, and training.freeze.
  void init_from_source();
  std::string refit_energy_shift(const std::vector<int64_t>& frames, bool note_heads = false);
  std::vector<int64_t> refit_sample() const;
  std::vector<std::vector<int64_t>> frames_of_head_;   // a multi-head model's training frames per head
  void log_heads(const ModelMetadata& source) const;
  void freeze_descriptor();
  void warn_about_data() const;
  void choose_where_data_lives();
  /// The batches of frames idx(0), idx(1), ..., idx(count - 1) of `frames`, in order (an empty
  /// idx(k) is no batch): put together from `resident` when the data stays on the device, else
  /// built ahead on the host (data.prefetch).
  std::unique_ptr<BatchPrefetcher> batches_of(const FrameSource& frames, const std::vector<BatchTensors>& resident,
                                              std::size_t count,
                                              std::function<std::vector<int64_t>(std::size_t)> idx) const;
  void log_progress(int64_t steps_per_epoch, const MetricTotals& sums) const;
  void save_inside_epoch(int64_t epoch_step, const MetricSums& sums);
  void stop_if_diverged(const MetricSums& sums, const char* what, int64_t epoch);
  Communicator& gradient_comm() { return nccl_ ? *nccl_ : comm_; }
  MetricSums train_epoch();
  void start_outputs();
  bool end_epoch(const MetricSums& train);
  void finish_outputs();
  void step_optimizer();
  void profile_step();
  void report_profile();
  void log_memory() const;
  void save_checkpoint(bool best);
  void update_best(const std::filesystem::path& epoch_dir);
  void load_checkpoint(const std::string& dir);
  void restore_capacity(const nlohmann::json& saved, const std::string& dir);
  std::string newest_intact_checkpoint();
  void repair_after_resume(const std::string& resumed_from);
  void trim_metrics() const;
  std::string checkpoint_dir() const;
  void log(const std::string& line) const;
  void swap_ema();

  Config config_;
  std::string config_text_;
  Communicator& comm_;
  DataSplit data_;
  std::unique_ptr<SpeciesMap> species_;
  BuiltModel model_;
  torch::Dtype dtype_;
  torch::Device device_ = torch::kCPU;
  torch::Dtype accumulate_ = torch::kFloat64;
  bool data_on_device_ = false;                 // training.data_on_device, resolved for device_ and the data
  // training.grouped, resolved: training batches through group_batch() and forward_grouped().
  std::optional<GroupingRule> grouping_;
  bool without_prior_ = false;                  // grouped steps without the model's prior (prior_is_zero_on)
  void choose_grouping();
  // training.cuda_graph: each step through a RecordedStep (recorded_step.h); null: the plain step.
  std::unique_ptr<RecordedStep> recorded_;
  void choose_recording();
  // The step on a batch with these sizes (group sizes, frames), which `fill` pads into the
  // recorded step's inputs.
  void take_step(const BatchTensors& shape, const std::function<void(const BatchCapacity&, BatchTensors&)>& fill,
                 const Prefactors& pre, double normalizer, MetricTotals& sums, AgreedCapacity* agreed);
  ReadyBatch ready_batch(const std::vector<int64_t>& part, const BatchCapacity& expected) const;
  // Several ranks: the recorded step grown to the largest capacity any rank's batch needs.
  void agree_capacity(const BatchTensors& shape, AgreedCapacity& agreed);
  // The training frames on the device for the recorded step (frame_bank.h), in place of
  // resident_train_; null: batches put together from resident_train_ or the host's.
  std::unique_ptr<FrameBank> bank_;
  std::unique_ptr<Communicator> nccl_;          // gradients of a multi-GPU run (else comm_)
  std::unique_ptr<GradientReducer> reducer_;
  std::vector<BatchTensors> resident_train_, resident_validation_;  // per frame, on device_
  std::vector<torch::Tensor> params_;
  std::vector<torch::Tensor> ema_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
  std::unique_ptr<FusedAdam> fused_;            // optimizer_'s steps by ATen's fused kernels (optimizer.fused)
  std::unique_ptr<Sampler> sampler_;
  std::unique_ptr<Schedule> schedule_;
  TrainState state_;
  StepTimes times_;
  PartClock clock_{torch::kCPU};                // times_'s parts (setup_device: on the training device)
  std::chrono::steady_clock::time_point start_;
  int64_t profile_steps_ = 0, steps_run_ = 0, steps_profiled_ = 0;
  std::unique_ptr<KernelProfile> profile_;
};

/// Where the training data lives (training.data_on_device resolved) and why, for the log.
struct DataResidency {
  bool on_device = false;
  std::string why;
};
/// training.data_on_device (`setting`: auto, true, false) for data of about `bytes` as per-frame
/// tensors on the device, with `available` bytes free there (none where it cannot be known: the
/// CPU, or a GPU without libmlip_cuda_ops.so). auto keeps the data on a GPU when it takes at most half
/// of the free memory (unknown: when it is not streamed from disk); true keeps it there, and is an
/// error (mlip::Error naming `file` and both sizes) when it does not fit.
DataResidency choose_data_residency(const std::string& setting, const std::string& file, bool cuda, bool streamed,
                                    int64_t bytes, std::optional<int64_t> available);
/// The frame bank `build` makes (training.data_on_device `setting` with the recorded step), or,
/// where it runs out of GPU memory under auto, none: batches are then copied per step, and `why`
/// says so for the log. Under true that is an error (mlip::Error naming `file` and what to set);
/// other errors pass on.
std::unique_ptr<FrameBank> bank_or_none(const std::function<std::unique_ptr<FrameBank>()>& build,
                                        const std::string& setting, const std::string& file, std::string& why);
/// About how many bytes the frames of `frames` take as per-frame tensors on a device: a sample of
/// up to 64 frames spread over the set, scaled by the atoms of all.
int64_t resident_bytes(const FrameSource& frames, const SpeciesMap& species, torch::Dtype dtype);

/// The frames idx of `frames` as one batch of host tensors.
BatchTensors host_batch(const FrameSource& frames, const std::vector<int64_t>& idx, const SpeciesMap& species,
                        torch::Dtype dtype);

/// A checkpoint's module (with its EMA weights when it has them) and metadata, on the CPU.
struct Trainable {
  torch::jit::Module module;
  ModelMetadata metadata;
};
Trainable read_checkpoint(const std::filesystem::path& dir);

/// Freezes a checkpoint folder into a model file: its EMA weights when it has them, metadata from
/// state.json plus `provenance`.
/// How export and compress write a model file.
struct ExportOptions {
  bool compress = false;          // compress_model's model (se_e2_a only)
  CompressOptions compression;
  /// "" (the trained dtype) or "float32": a float64 model's weights rounded to float32 for
  /// inference (pair_style mlip sums energies, forces and virials in float64 whatever the model).
  std::string dtype;
};

/// With options.compress, the model written is compress_model's (`log` gets its report).
void export_checkpoint(const std::string& checkpoint_dir, const std::string& output, nlohmann::json provenance,
                       const ExportOptions& options = {},
                       const std::function<void(const std::string&)>& log = {});

/// `mlip-trainer compress`: a checkpoint folder, or a model file exported by this mlip, to a
/// compressed model file (options.compress is implied).
void compress_file(const std::string& source, const std::string& output, ExportOptions options,
                   const std::function<void(const std::string&)>& log);

/// `mlip-trainer import`: a model file from settings (JSON: architecture, species, cutoff, dtype,
/// hyperparameters) and weights by name (a dict of tensors written by torch.save; every trainable
/// parameter of the architecture, and buffers optionally), e.g. from python/mace_to_mlip.py.
void import_model(const std::string& spec_path, const std::string& weights_path, const std::string& output,
                  const std::function<void(const std::string&)>& log);

/// `mlip-trainer test`'s options: what it writes besides the totals (empty paths: nothing), and
/// the head it evaluates.
struct TestOptions {
  std::string per_frame_csv;   // frame, origin, atoms, reference and predicted energy, force RMSE
  std::string forces_csv;      // one row per atom: element, reference and predicted force (parity plots)
  std::string head;            // a multi-head model's head to evaluate ("": the file's own)
};

/// A one-frame batch evaluated exactly as pair_style mlip evaluates its graphs: evaluate_graph()
/// on float64 arrays (the model's dtype and device are its business), edge_forces() after it.
Prediction evaluate_as_lammps(const Model& model, const BatchTensors& t);

/// `mlip-trainer deviation`: a committee's model deviation (mlip/model/deviation.h) on every frame of
/// a data file, written like pair_style mlip's file (frame index for the step); frames with
/// trust_lo <= max force deviation < trust_hi are written to `candidates` (extended XYZ) for
/// labelling.
struct DeviationOptions {
  std::string format = "auto";
  Units units;
  std::vector<std::string> type_elements;  // LAMMPS dumps without an element column
  std::string output = "model_devi.out";
  double relative = 0.0;
  double trust_lo = 0.0, trust_hi = 0.0;   // eV/A; trust_hi 0: no upper bound
  std::string candidates;                  // empty: none written
};
struct DeviationCounts {
  std::size_t frames = 0, accurate = 0, candidates = 0, failed = 0;
};
DeviationCounts model_deviation(const std::vector<std::string>& models, const std::string& data,
                                const DeviationOptions& options, const std::function<void(const std::string&)>& log);

/// Evaluates a model file on data. Logs the force RMSE per species (where the data has forces).
MetricSums test_model(const std::string& model_path, const std::string& data_path, const std::string& format,
                      const Units& units, const TestOptions& options,
                      const std::function<void(const std::string&)>& log);

}  // namespace mlip::trainer
