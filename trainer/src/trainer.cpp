#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint.h"
#include "frame_bank.h"
#include "mlip/model/device.h"
#include "mlip/model/device_memory.h"
#include "mlip/model/runtime.h"
#include "mlip/error.h"
#include "mlip/data/io.h"
#include "mlip/ops/operators.h"
#include "prefetch.h"
#include "recorded_step.h"
#include "training.h"

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/serialize.h>

namespace mlip::trainer {
namespace fs = std::filesystem;

namespace {

std::string format_duration(double seconds) {
  const auto s = static_cast<long>(seconds);
  return fmt::format("{}:{:02d}:{:02d}", s / 3600, (s / 60) % 60, s % 60);
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

BatchTensors host_batch(const FrameSource& frames, const std::vector<int64_t>& idx, const SpeciesMap& species,
                        torch::Dtype dtype) {
  std::vector<Frame> storage;
  return to_tensors(make_batch(frames.frames(idx, storage), species), dtype);
}

namespace {

// A tensor's bytes as LibTorch's GPU allocator holds them (blocks of 512 bytes).
int64_t allocated_bytes(const torch::Tensor& t) {
  const int64_t bytes = t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0;
  return (bytes + 511) / 512 * 512;
}

std::string gib(int64_t bytes) { return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / (1 << 30)); }

}  // namespace

int64_t resident_bytes(const FrameSource& frames, const SpeciesMap& species, torch::Dtype dtype) {
  const std::size_t n = frames.size();
  if (n == 0) return 0;
  const std::size_t k = std::min<std::size_t>(n, 64);
  int64_t bytes = 0, sampled_atoms = 0, atoms = 0;
  for (std::size_t j = 0; j < k; ++j) {
    const auto i = static_cast<int64_t>(j * n / k);
    const BatchTensors b = host_batch(frames, {i}, species, dtype);
    for (auto member : BatchTensors::kTensors) bytes += allocated_bytes(b.*member);
    sampled_atoms += b.n_atoms;
  }
  for (std::size_t i = 0; i < n; ++i) atoms += frames.atoms(i);
  return static_cast<int64_t>(static_cast<double>(bytes) * static_cast<double>(atoms) /
                              static_cast<double>(std::max<int64_t>(sampled_atoms, 1)));
}

DataResidency choose_data_residency(const std::string& setting, const std::string& file, bool cuda, bool streamed,
                                    int64_t bytes, std::optional<int64_t> available) {
  const std::string size = "about " + gib(bytes);
  if (setting == "false") return {false, "training.data_on_device false"};
  if (setting == "true") {
    if (available && bytes > *available)
      throw Error(fmt::format("{}: training.data_on_device true: the training and validation frames take {} on the "
                              "device, more than its {} free: set it to auto or false (batches copied per step)",
                              file, size, gib(*available)));
    return {true, "training.data_on_device true, " + size};
  }
  if (!cuda) return {false, "on the CPU"};
  if (available)
    return *available >= 2 * bytes
               ? DataResidency{true, fmt::format("{}, at most half of the GPU's {} free", size, gib(*available))}
               : DataResidency{false, fmt::format("{}, more than half of the GPU's {} free", size, gib(*available))};
  return streamed ? DataResidency{false, "streamed from disk, and the GPU's free memory is unknown"}
                  : DataResidency{true, size + "; the GPU's free memory is unknown"};
}

std::unique_ptr<FrameBank> bank_or_none(const std::function<std::unique_ptr<FrameBank>()>& build,
                                        const std::string& setting, const std::string& file, std::string& why) {
  try {
    return build();
  } catch (const std::exception& e) {
    if (!is_out_of_memory(e)) throw;
  }
  const std::string what = "the frame bank ran out of GPU memory while it was built (it holds the training frames and, "
                           "while it joins them, a second copy of its largest tensor)";
  if (setting == "true")
    throw Error(file + ": training.data_on_device true: " + what + ": set training.data_on_device auto or false "
                "(batches copied per step)");
  release_cached_memory();   // what the failed bank took
  why = "training.data_on_device auto: " + what + "; the training batches are copied to the device per step instead";
  return nullptr;
}

Trainer::Trainer(Config config, std::string config_text, Communicator& comm)
    : config_(std::move(config)), config_text_(std::move(config_text)), comm_(comm),
      dtype_(torch_dtype(config_.model)),
      accumulate_(config_.accumulate_dtype == "float32" ? torch::kFloat32 : torch::kFloat64) {}

// The recorded step first: its recording holds NCCL work on nccl_, whose ncclCommDestroy waits
// until no recording refers to it (members go in reverse order, nccl_ before recorded_).
Trainer::~Trainer() { recorded_.reset(); }

void Trainer::setup_device() {
  std::string note;
  device_ = choose_device(config_.device, comm_.local_rank(), config_.file + ": training.device", &note);
  clock_ = PartClock(device_);
  if (device_.is_cuda()) {
    c10::impl::getDeviceGuardImpl(torch::kCUDA)->setDevice(device_);  // LibTorch's current device
    at::globalContext().setAllowTF32CuBLAS(config_.tf32);
    at::globalContext().setAllowTF32CuDNN(config_.tf32);
    if (config_.deterministic) set_deterministic(true);
  }
  const std::string& backend = config_.comm_backend;
  if (backend == "nccl" && !device_.is_cuda()) {
    throw Error(config_.file + ": communication.backend nccl needs a GPU, but training.device gave " + note);
  }
  if (comm_.size() > 1 && (backend == "nccl" || (backend == "auto" && nccl_available()))) {
    // NCCL needs every rank on a GPU of its own (it refuses two ranks on one GPU), told apart by
    // node and PCI bus (a launcher may show each rank one GPU, all as cuda:0): agreed by all ranks,
    // those on the CPU too.
    const GpuSharing gpus = gpu_sharing(comm_, device_.is_cuda() ? gpu_identity(device_) : std::string());
    if (gpus.every_rank_its_own(comm_.size())) {
      nccl_ = make_nccl_communicator(comm_, device_, config_.comm_timeout);
    } else if (backend == "nccl") {
      throw Error(config_.file + ": communication.backend nccl needs one GPU per rank, but some ranks share a GPU "
                  "(more ranks on a node than GPUs, or training.device naming one GPU for all) or run on the CPU");
    } else if (gpus.on_gpu > 0) {
      log("communication: gradients over MPI, not NCCL: some ranks share a GPU or run on the CPU");
    }
  }
  log(fmt::format("device: rank 0 on {}{}, {} LibTorch CPU thread(s) a rank; gradients summed by {} in buckets of <= {} MB{}",
                  note, comm_.size() > 1 ? " (each rank: its node-local rank's GPU)" : "", at::get_num_threads(),
                  gradient_comm().name(), config_.bucket_mb,
                  device_.is_cuda() ? fmt::format("; TF32 {}, deterministic kernels {}, sums in {}",
                                                  config_.tf32 ? "on" : "off", config_.deterministic ? "on" : "off",
                                                  config_.accumulate_dtype)
                                    : ""));
}

std::unique_ptr<BatchPrefetcher> Trainer::batches_of(const FrameSource& frames, const std::vector<BatchTensors>& resident,
                                                     std::size_t count,
                                                     std::function<std::vector<int64_t>(std::size_t)> idx) const {
  if (!resident.empty()) {
    // On the device already: put together there, on the training thread.
    return std::make_unique<BatchPrefetcher>(count, std::move(idx), [&resident](const std::vector<int64_t>& part) {
      std::vector<const BatchTensors*> parts;
      parts.reserve(part.size());
      for (int64_t k : part) parts.push_back(&resident[static_cast<std::size_t>(k)]);
      return concat(parts);
    }, 0);
  }
  const SpeciesMap* species = species_.get();
  const torch::Dtype dtype = dtype_;
  // Grouped there too (training.grouped, cuda_graph): on the host, off the step's thread.
  return std::make_unique<BatchPrefetcher>(count, std::move(idx), [&frames, species, dtype, grouping = grouping_](
                                                                      const std::vector<int64_t>& part) {
    BatchTensors t = host_batch(frames, part, *species, dtype);
    return grouping ? group_batch(t, *grouping) : t;
  }, static_cast<std::size_t>(config_.prefetch), device_);
}

void Trainer::log(const std::string& line) const {
  if (comm_.is_root()) {
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
  }
}

std::string Trainer::checkpoint_dir() const { return (fs::path(config_.output_dir) / "checkpoints").string(); }

void Trainer::setup_model_and_statistics() {
  data_ = load_data(config_, [this](const std::string& s) { log(s); });
  log(fmt::format("data: {} training and {} validation frames", data_.train->size(), data_.validation->size()));
  const auto cores = static_cast<std::size_t>(cpu_affinity().cores);   // prefetching hides reading only where a core is left
  if (data_.train->streamed() && config_.prefetch > 0 && cores > 0 && cores <= static_cast<std::size_t>(at::get_num_threads())) {
    log(fmt::format("data: rank 0 may run on {} core(s) (its CPU affinity), as many as its LibTorch threads: the prefetching "
                    "thread shares them, so reading and neighbour lists add to each step (Open MPI binds a rank to a core "
                    "by default, to a socket beyond 2 ranks; mpirun --bind-to none, or --map-by slot:PE=N for N cores a rank, leaves it one)", cores));
  }
  species_ = std::make_unique<SpeciesMap>(config_.model.species);
  warn_about_data();

  model_ = build_model(config_.model);
  // Statistics of the training frames (identical on every rank: all ranks hold the split), from
  // the sums of FrameSource::stats: the same for frames in memory and streamed from a pack.
  const PackStats& stats = data_.train->stats();
  const std::size_t ns = config_.model.species.size();
  const std::vector<double> shortest = shortest_by_species(stats, *species_, ns, config_.model.cutoff);
  // How close atoms come in the training data: compressed models tabulate down to 0.75 x this.
  const double closest = *std::min_element(shortest.begin(), shortest.end());
  if (std::isfinite(closest)) model_.metadata.provenance["shortest_training_distance"] = closest;
  const std::vector<double> shift = fit_energy_shift(stats, *species_, ns);
  const double scale = force_rms(stats);
  std::vector<int64_t> first(std::min<std::size_t>(data_.train->size(), 200));
  std::iota(first.begin(), first.end(), 0);
  std::vector<Frame> storage;
  fit_descriptor_statistics(model_, data_.train->frames(first, storage));
  const nlohmann::json& given = config_.model.hyperparameters;
  if (given.is_object() && given.contains("sel") && given.at("sel").is_string())
    log(fmt::format("statistics: sel {} ({}, from the first {} training frames)", model_.metadata.hyperparameters.at("sel").dump(),
                    given.at("sel").get<std::string>(), first.size()));
  if (config_.model.repulsion != "none") {
    fit_repulsion(model_, shortest);
    std::string radii;
    for (const auto& [pair, r] : model_.metadata.hyperparameters["repulsion"]["inner"].items())
      radii += fmt::format(" {}={:.3f}", pair, r.get<double>());
    log(fmt::format("statistics: {} repulsion below the shortest training distances (A){}", config_.model.repulsion, radii));
  }
  {
    torch::NoGradGuard no_grad;  // setting buffers
    // a multi-head model's heads all start from the shift of all the data (init_from re-fits them per head)
    torch::Tensor buffer = model_.module.attr("energy_shift").toTensor();
    buffer.copy_(buffer.dim() == 2 ? torch::tensor(shift).unsqueeze(1) : torch::tensor(shift));
    if (scale > 0) model_.module.attr("energy_scale").toTensor().fill_(scale);
  }
  std::string shifts;
  for (std::size_t s = 0; s < shift.size(); ++s) shifts += fmt::format(" {}={:.6g}", config_.model.species[s], shift[s]);
  log(fmt::format("statistics: energy shift (eV){}; energy scale {:.4g} (force RMS, eV/A)", shifts, scale));
  if (!config_.init_from.empty()) init_from_source();
  without_prior_ = prior_is_zero_on(model_.module, shortest);
  if (without_prior_)
    log("training: the repulsion prior is zero on every training edge (its inner radii are at most the data's shortest "
        "distances): grouped training steps leave it out; validation and the exported model keep it");

  model_.module.to(device_);
  choose_where_data_lives();
  resident_train_.clear();
  resident_validation_.clear();
  bank_.reset();
  if (data_on_device_) {
    // One frame per entry, on the device for good: batches are put together there (concat). The
    // recorded step's training frames go into a bank instead (below).
    for (auto [frames, cache] : {std::pair{data_.train.get(), &resident_train_}, {data_.validation.get(), &resident_validation_}}) {
      if (cache == &resident_train_ && config_.cuda_graph != "false") continue;
      cache->reserve(frames->size());
      for (std::size_t k = 0; k < frames->size(); ++k)
        cache->push_back(to_device(host_batch(*frames, {static_cast<int64_t>(k)}, *species_, dtype_), device_));
    }
  }
  choose_grouping();
  // A fine-tuning's shift re-fitted on all the new frames; a multi-head model from scratch: each
  // head its own E0s.
  const bool heads = !model_heads(model_.metadata.hyperparameters).empty();
  if (config_.init_from.empty() ? heads : config_.refit_energy_shift) {
    std::vector<int64_t> all(data_.train->size());
    std::iota(all.begin(), all.end(), 0);
    const std::string change = refit_energy_shift(all, /*note_heads=*/true);
    if (!change.empty()) log("statistics: energy shift re-fitted to the data's residuals (eV):" + change);
  }
  params_ = trainable_parameters(model_.module);
  reducer_ = std::make_unique<GradientReducer>(params_, static_cast<std::size_t>(config_.bucket_mb * (1 << 20)));
  if (config_.ema_decay > 0)
    for (const auto& p : params_) ema_.push_back(p.detach().clone());
  if (config_.optimizer == "adamw") {
    optimizer_ = std::make_unique<torch::optim::AdamW>(
        params_, torch::optim::AdamWOptions(config_.lr).weight_decay(config_.weight_decay).amsgrad(config_.amsgrad));
  } else {
    optimizer_ = std::make_unique<torch::optim::Adam>(
        params_, torch::optim::AdamOptions(config_.lr).weight_decay(config_.weight_decay).amsgrad(config_.amsgrad));
  }
  fused_.reset();
  if (config_.fused == "true" || (config_.fused == "auto" && (device_.is_cuda() || config_.cuda_graph != "false")))
    fused_ = std::make_unique<FusedAdam>(*optimizer_, config_.optimizer == "adamw");
  if (fused_) log(fmt::format("optimizer: {} by ATen's fused kernel (training.optimizer.fused)", config_.optimizer));
  choose_recording();
  if (data_on_device_ && recorded_) {
    log(fmt::format("data: building the frame bank on the device from {} training frames (each grouped once)",
                    data_.train->size()));
    std::string why;
    bank_ = bank_or_none([&] { return std::make_unique<FrameBank>(*data_.train, *species_, dtype_, *grouping_, device_); },
                         config_.data_on_device, config_.file, why);
    if (bank_)
      log(fmt::format("data: the training frames in one bank on the device ({}), each batch gathered from it into the "
                      "recorded step's inputs", gib(bank_->bytes())));
    else if (comm_.is_root())
      log("WARNING: " + why);
    else   // log() is rank 0's: another rank's fallback is said by that rank
      std::fprintf(stderr, "mlip-trainer rank %d: WARNING: %s\n", comm_.rank(), why.c_str());
  }
  sampler_ = std::make_unique<Sampler>(*data_.train, config_.batch_frames, config_.batch_atoms, config_.seed,
                                       at::get_num_threads());
  const int64_t steps_per_epoch = (sampler_->batches_per_epoch() + config_.accumulate - 1) / config_.accumulate;
  schedule_ = std::make_unique<Schedule>(config_, steps_per_epoch * config_.epochs);
}

// training.grouped: training batches grouped by species and embedding net for the model's
// forward_grouped() (group_batch: sizes from the host, so the forward waits for no size from the
// device), for models that have it (se_e2_a) with one head.
bool prior_is_zero_on(torch::jit::Module& module, const std::vector<double>& shortest) {
  if (!module.hasattr("rep_inner") || !module.find_method("forward_grouped_learned")) return false;
  const torch::Tensor inner = module.attr("rep_inner").toTensor().to(torch::kCPU, torch::kFloat64).contiguous();
  if (static_cast<std::size_t>(inner.numel()) != shortest.size()) return false;
  const double* r_in = inner.data_ptr<double>();
  for (std::size_t k = 0; k < shortest.size(); ++k)
    if (!(r_in[k] <= shortest[k] * (1.0 + 1e-6))) return false;
  return true;
}

void Trainer::choose_grouping() {
  grouping_.reset();
  if (!config_.grouped && config_.cuda_graph == "false") return;
  const nlohmann::json& hyper = model_.metadata.hyperparameters;
  ModelMetadata meta = model_.metadata;
  meta.grouped_forward = model_.module.find_method("forward_grouped").has_value();
  if (!meta.grouped_forward || meta.message_passing_layers > 0 || !model_heads(hyper).empty())
    throw Error(std::string(config_.grouped ? "training.grouped: true" : "training.cuda_graph") +
                " needs a model with forward_grouped() and one head (se_e2_a); this " +
                meta.architecture + " model has " +
                (!model_heads(hyper).empty()        ? std::string("several heads")
                 : meta.message_passing_layers > 0 ? std::string("message passing (its batches are not grouped by net)")
                                                   : std::string("no forward_grouped()")));
  grouping_ = GroupingRule::of(meta);
  log(std::string("training: batches grouped by species and embedding net for forward_grouped() (") +
      (config_.grouped ? "training.grouped" : "for training.cuda_graph") + ")");
}

// training.cuda_graph: the whole training step through a RecordedStep (recorded as a CUDA graph,
// or eager), on grouped batches, one batch a step, with the fused Adam.
void Trainer::choose_recording() {
  recorded_.reset();
  if (config_.cuda_graph == "false") return;
  const std::string key = config_.file + ": training.cuda_graph " + config_.cuda_graph;
  if (config_.accumulate > 1)
    throw Error(key + ": takes one batch a step; data.batch.accumulate is " + std::to_string(config_.accumulate));
  if (!fused_) throw Error(key + ": takes the fused Adam step; training.optimizer.fused is false");
  StepParts parts;
  parts.module = &model_.module;
  parts.params = &params_;
  parts.adam = fused_.get();
  parts.reducer = reducer_.get();
  parts.comm = &gradient_comm();
  parts.grad_clip = config_.grad_clip;
  parts.ema = &ema_;
  parts.accumulate = accumulate_;
  parts.loss = config_.loss;
  parts.huber_delta = config_.huber_delta;
  parts.rule = *grouping_;
  parts.without_prior = without_prior_;
  recorded_ = std::make_unique<RecordedStep>(parts, config_.cuda_graph == "true", device_);
  // Several ranks agree on the step's capacity before each step (agree_capacity): in rows as wide
  // on every rank.
  const auto ns = static_cast<std::size_t>(grouping_->n_species);
  if (comm_.size() > 1) check_groups_agree(comm_, ns, grouping_->pair_nets ? ns * ns : ns);
  log(config_.cuda_graph == "true"
          ? "training: each step recorded as a CUDA graph and replayed (training.cuda_graph), batches padded to capacities"
          : "training: each step as the recorded one, run eagerly (training.cuda_graph eager)");
}

const BatchCapacity* Trainer::step_capacity() const { return recorded_ ? &recorded_->capacity() : nullptr; }

// Training frames `part` made ready for the recorded step for the capacity `expected` (grown by
// them): gathered from the frame bank, or built, grouped and padded on the host (any thread).
ReadyBatch Trainer::ready_batch(const std::vector<int64_t>& part, const BatchCapacity& expected) const {
  if (bank_) return bank_->ready(part, expected);
  return ready_on_host(group_batch(host_batch(*data_.train, part, *species_, dtype_), *grouping_), expected,
                       grouping_->pad_length, device_);
}

// Every rank's recorded step grows to the capacity the largest of their batches needs (one host
// all-reduce of a few numbers a step), so that the ranks record anew together and replay the same
// shapes: a rank recording alone would keep the others waiting in their replayed all-reduces.
// The prefetching thread pads later batches for the agreed capacity.
void Trainer::agree_capacity(const BatchTensors& shape, AgreedCapacity& agreed) {
  BatchCapacity want = recorded_->capacity();
  fit_capacity(shape, want);
  const BatchCapacity largest = largest_over_ranks(comm_, want);
  if (largest == recorded_->capacity()) return;
  recorded_->reserve(largest);
  agreed.set(largest);
}

// One batch's step through the RecordedStep: forward, gradients, clipping, Adam and EMA; with
// several ranks (`agreed`), at the capacity they agree on.
void Trainer::take_step(const BatchTensors& shape, const FillInputs& fill, const Prefactors& pre, double normalizer,
                        MetricTotals& sums, AgreedCapacity* agreed) {
  const double lr = schedule_->lr(state_.step);
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  const BatchCapacity before = recorded_->capacity();
  if (agreed) agree_capacity(shape, *agreed);
  if (profile_ && recorded_->recording() && !(recorded_->capacity() == before && recorded_->fits(shape))) {
    log("--profile: stopped before the training step is recorded anew (a recording is not profiled)");
    report_profile();
  }
  sums.add(recorded_->step(shape, fill, pre, normalizer, static_cast<double>(shape.n_frames), lr,
                           ema_decay_at(config_.ema_decay, state_.step)));
  gradient_comm().watch_enqueued("a recorded training step's all-reduces");
  ++state_.step;
  const BatchCapacity& now = recorded_->capacity();
  if (!(now == before))
    log(fmt::format("training.cuda_graph: step {} padded to {} frames, {} atoms, {} edges{}", state_.step, now.frames - 1,
                    now.atoms(), now.n_edges(), recorded_->recording() ? " (recorded anew)" : ""));
}

// training.data_on_device for this data and device; every rank decides alike (the same frames,
// the least free memory of the ranks, each rank's share of a GPU it shares).
void Trainer::choose_where_data_lives() {
  const bool streamed = data_.train->streamed() || data_.validation->streamed();
  const int64_t bytes = config_.data_on_device == "false" || (config_.data_on_device == "auto" && !device_.is_cuda())
                            ? 0
                            : resident_bytes(*data_.train, *species_, dtype_) +
                                  resident_bytes(*data_.validation, *species_, dtype_);
  // Every rank's figure (-1: unknown), in collectives all ranks reach; ranks that share a GPU
  // (gpu_identity: node and PCI bus; in a build without NCCL node and device, which errs towards
  // sharing) each hold the frames, so each counts on its share.
  const int sharing = gpu_sharing(comm_, device_.is_cuda() ? gpu_identity(device_) : std::string()).with_mine;
  const auto m = device_memory(device_);
  const std::vector<double> each = gather_rows(comm_, {m ? static_cast<double>(m->available() / sharing) : -1.0});
  std::optional<int64_t> available;
  if (std::none_of(each.begin(), each.end(), [](double v) { return v < 0; }))
    available = static_cast<int64_t>(*std::min_element(each.begin(), each.end()));
  const DataResidency where = choose_data_residency(config_.data_on_device, config_.file, device_.is_cuda(), streamed,
                                                    bytes, available);
  data_on_device_ = where.on_device;
  log(fmt::format("data: {} ({})", data_on_device_ ? "frames kept on the device"
                                   : device_.is_cuda() ? "batches copied to the device per step"
                                                       : "batches built per step",
                  where.why));
}

// Data that cannot teach the model what the config asks: frames without a single pair within the
// cutoff (an error when no training frame has one), and model species no training frame has.
void Trainer::warn_about_data() const {
  const FrameSource& train = *data_.train;
  std::size_t isolated = 0;   // frames without a pair within the cutoff
  std::vector<bool> present(config_.model.species.size(), false);
  if (train.streamed()) {
    // No pass over the frames: elements from the statistics, and "every frame isolated" from the
    // shortest distances (a frame of a streamed set without a pair is not found at start).
    const PackStats& st = train.stats();
    for (int z = 1; z < static_cast<int>(st.atoms_by_z.size()); ++z)
      if (st.atoms_by_z[static_cast<std::size_t>(z)] > 0) present[static_cast<std::size_t>(species_->index(z, "the training data"))] = true;
    const std::vector<double> r = shortest_by_species(st, *species_, present.size(), config_.model.cutoff);
    if (st.has_shortest && std::none_of(r.begin(), r.end(), [](double x) { return std::isfinite(x); })) isolated = train.size();
  } else {
    std::vector<int64_t> all(train.size());
    std::iota(all.begin(), all.end(), 0);
    std::vector<Frame> storage;
    for (const Frame* f : train.frames(all, storage)) {
      isolated += f->num_edges() == 0 ? 1 : 0;
      for (int z : f->structure.numbers) present[static_cast<std::size_t>(species_->index(z, f->structure.origin))] = true;
    }
  }
  if (isolated == train.size()) {
    throw Error(fmt::format("{}: model.cutoff {} A: no atom of the {} training frames has a neighbour within it, so "
                            "the model could learn nothing but an energy per species: give a larger cutoff",
                            config_.file, config_.model.cutoff, train.size()));
  }
  if (isolated > 0) {
    log(fmt::format("WARNING: {} of {} training frames have no pair of atoms within model.cutoff = {} A: the model "
                    "learns nothing from their geometry",
                    isolated, train.size(), config_.model.cutoff));
  }
  for (std::size_t k = 0; k < present.size(); ++k) {
    if (!present[k]) {
      log(fmt::format("WARNING: model species '{}' (model.species) occurs in no training frame: its parameters "
                      "stay as initialised",
                      config_.model.species[k]));
    }
  }
}

void Trainer::swap_ema() {
  if (ema_.empty()) return;
  torch::NoGradGuard no_grad;  // swapping weights, not evaluating
  for (std::size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor tmp = params_[i].detach().clone();
    params_[i].copy_(ema_[i]);
    ema_[i].copy_(tmp);
  }
}

void Trainer::step_optimizer() {
  // Gradients summed over the ranks in buckets (the average over the global batch is already in
  // the loss normalisation); copying into and out of the buckets counts as communication.
  clock_.start();
  reducer_->reduce(gradient_comm());
  clock_.stop(&times_.communication);
  clock_.start();
  // The global gradient norm clipped (the same on every rank: the gradients are already reduced).
  if (config_.grad_clip > 0) reducer_->clip_norm(config_.grad_clip);
  const double lr = schedule_->lr(state_.step);
  for (auto& group : optimizer_->param_groups()) group.options().set_lr(lr);
  if (fused_)
    fused_->step();
  else
    optimizer_->step();
  optimizer_->zero_grad();
  update_ema(ema_, params_, ema_decay_at(config_.ema_decay, state_.step));
  clock_.stop(&times_.optimizer);
  ++state_.step;
}

// --profile N: steps 3 .. N + 2 of this run under LibTorch's profiler (the first two pay for
// TorchScript's optimisation and the allocator's warm-up), then its table in the log.
void Trainer::profile_step() {
  if (profile_steps_ <= 0 || !comm_.is_root()) return;
  ++steps_run_;
  if (!profile_ && steps_run_ == 2 && steps_profiled_ == 0) {
    try {   // a profile that cannot start stops nothing but itself
      profile_ = std::make_unique<KernelProfile>(device_);
    } catch (const std::exception& e) {
      log(std::string("WARNING: --profile: no profile: ") + e.what());
      profile_steps_ = 0;
    }
    return;
  }
  if (profile_ && ++steps_profiled_ == profile_steps_) report_profile();
}

// The profile so far (also where the run ends before --profile's steps were taken).
void Trainer::report_profile() {
  if (!profile_) return;
  ProfileSummary summary;
  try {
    summary = profile_->stop();
  } catch (const std::exception& e) {
    profile_.reset();
    log(std::string("WARNING: --profile: the profile failed: ") + e.what());
    return;
  }
  profile_.reset();
  std::string table = format_profile(summary, "profile: ", static_cast<double>(steps_profiled_), "step");
  table.pop_back();   // its last newline
  log(fmt::format("profile: {} optimiser steps under LibTorch's profiler (slower than without it); per step:\n{}",
                  steps_profiled_, table));
}

MetricSums Trainer::train_epoch() {
  const auto batches = sampler_->epoch_batches(state_.epoch);
  const int64_t n_steps = (static_cast<int64_t>(batches.size()) + config_.accumulate - 1) / config_.accumulate;
  // A run resumed from a checkpoint inside this epoch goes on from its step, with the sums so far.
  const int64_t first_step = state_.epoch_step;
  MetricSums resumed;
  if (!state_.epoch_sums.empty() && comm_.is_root()) resumed.unpack(state_.epoch_sums);
  state_.epoch_sums.clear();
  MetricTotals sums(resumed);   // on the device: read at progress lines, checkpoints and the end
  // This rank's share of every global batch from there on, built ahead by the prefetcher.
  const std::size_t first_batch = static_cast<std::size_t>(first_step * config_.accumulate);
  const std::size_t n_batches = batches.size() - std::min(first_batch, batches.size());
  const auto share_of = [&batches, first_batch, this](std::size_t k) {
    return batches.share(first_batch + k, comm_.rank(), comm_.size());
  };
  std::unique_ptr<BatchPrefetcher> prefetch;
  std::unique_ptr<Prefetcher<ReadyBatch>> ready;
  const auto agreed = std::make_shared<AgreedCapacity>();   // several ranks: their last agreed capacity
  if (recorded_) {
    // Made ready ahead for the capacities the step will have grown to by then.
    ready = std::make_unique<Prefetcher<ReadyBatch>>(n_batches, share_of,
        [this, agreed, expected = recorded_->capacity()](const std::vector<int64_t>& part) mutable {
          raise_capacity(expected, agreed->get());
          ReadyBatch r = ready_batch(part, expected);
          expected = r.capacity;
          return r;
        }, static_cast<std::size_t>(config_.prefetch), device_);
  } else {
    prefetch = batches_of(*data_.train, resident_train_, n_batches, share_of);
  }
  clock_.settle();               // nothing of an earlier epoch left to add
  times_ = StepTimes{};
  reset_peak_memory(device_);   // the epoch's peak, for end_epoch's memory line
  const auto t_epoch = std::chrono::steady_clock::now();
  for (int64_t s = first_step; s < n_steps; ++s) {
    if (config_.max_minutes > 0) {
      // Every rank must use the same learning rate: the mean of the ranks' clocks.
      double f = (state_.elapsed_seconds + since(start_)) / (60.0 * config_.max_minutes);
      comm_.allreduce_sum(&f, 1);
      schedule_->set_time_fraction(f / comm_.size());
      if (f / comm_.size() >= 1.0 && s > first_step) break;   // time is up, also inside an epoch (end_epoch says so)
    }
    const Prefactors pre = schedule_->prefactors(state_.step);
    const int64_t b0 = s * config_.accumulate, b1 = std::min<int64_t>(b0 + config_.accumulate, batches.size());
    double global_frames = 0;
    for (int64_t k = b0; k < b1; ++k) global_frames += static_cast<double>(batches.frames(static_cast<std::size_t>(k)));
    for (int64_t k = b0; k < b1; ++k) {
      const bool share = batches.frames(static_cast<std::size_t>(k)) > comm_.rank();
      // No share of this batch: the plain step adds no gradient; a recorded one takes its step on
      // an empty batch, so that every rank replays the same collectives.
      if (!share && !recorded_) continue;
      if (recorded_) {   // not split (the host does not wait for the replays): host times
        auto t0 = std::chrono::steady_clock::now();
        const ReadyBatch r = share ? ready->next() : ready_batch({}, recorded_->capacity());
        times_.data += since(t0);
        t0 = std::chrono::steady_clock::now();
        take_step(r.shape, r.fill, pre, global_frames, sums, comm_.size() > 1 ? agreed.get() : nullptr);
        times_.model += since(t0);
        continue;
      }
      clock_.start();
      BatchTensors t = to_device(prefetch->next(), device_);
      if (grouping_ && t.center_groups.empty()) t = group_batch(t, *grouping_);   // not yet grouped (put together on the device)
      clock_.stop(&times_.data);
      clock_.start();
      // Grouped batches' indices are made by the trainer (make_batch, group_batch): the operators'
      // index checks, a read back from the GPU each, are off for them.
      std::optional<DeviceValueChecksPaused> trusted;
      if (grouping_) trusted.emplace();
      const Prediction p = predict(model_.module, t, /*create_graph=*/true, accumulate_, without_prior_ && grouping_);
      torch::Tensor loss = loss_terms(p, t, pre, config_.loss, config_.huber_delta, global_frames, nullptr, &sums);
      // Gradients of the parameters only: the edge vectors' would need the model's second
      // derivatives with respect to positions (se_e2_a's tanh_net does not compute them).
      loss.backward({}, {}, false, params_);
      clock_.stop(&times_.model);
    }
    if (!recorded_) step_optimizer();
    profile_step();
    log_progress(n_steps, sums);
    if (config_.checkpoint_every_steps > 0 && state_.step % config_.checkpoint_every_steps == 0 && s + 1 < n_steps) {
      save_inside_epoch(s + 1, sums.read());
    }
  }
  state_.epoch_step = 0;
  clock_.settle();
  // Read before the wall time is taken: it waits for the epoch's last steps (a recorded step's
  // replays are only queued, and its clock has no events to wait for).
  std::vector<double> v = sums.read().pack();
  times_.wall = since(t_epoch);
  comm_.allreduce_sum(v.data(), v.size());
  MetricSums total;
  total.unpack(v);
  return total;
}

void Trainer::log_progress(int64_t steps_per_epoch, const MetricTotals& totals) const {
  if (config_.log_every <= 0 || state_.step % config_.log_every != 0 || !comm_.is_root()) return;
  const MetricSums sums = totals.read();
  const double elapsed = state_.elapsed_seconds + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double total = double(steps_per_epoch) * config_.epochs;
  const double done = double(state_.step);
  double eta = elapsed / std::max(done, 1.0) * (total - done);
  if (config_.max_minutes > 0) eta = std::min(eta, std::max(0.0, 60.0 * config_.max_minutes - elapsed));
  std::printf("  epoch %ld step %ld lr %.3g | train loss %.4g | %.2f steps/s | ETA %s\n",
              static_cast<long>(state_.epoch + 1), static_cast<long>(state_.step), schedule_->lr(state_.step),
              sums.frames > 0 ? sums.loss / sums.frames : 0.0, done / std::max(elapsed, 1e-9),
              format_duration(eta).c_str());
  std::fflush(stdout);
}

// A run whose loss or weights are no longer finite has diverged: it ends before it writes a
// checkpoint, so that its checkpoints (best/ among them) keep finite weights to resume from. A
// loss trails the weights by a step (the update after it may be the one that diverged): the
// weights and the EMA's are checked too, with one read. The sums are the ranks' reduced ones and
// the weights the same on every rank (the flag is summed all the same): every rank stops alike.
void Trainer::stop_if_diverged(const MetricSums& sums, const char* what, int64_t epoch) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> finite;
  for (const auto* weights : {&params_, &ema_})
    for (const torch::Tensor& p : *weights) finite.push_back(torch::isfinite(p).all());
  double bad_weights = finite.empty() ? 0.0 : static_cast<double>(!torch::stack(finite).all().item<bool>());
  comm_.allreduce_sum(&bad_weights, 1);
  if (std::isfinite(sums.loss) && bad_weights == 0.0) return;
  const std::string found = std::isfinite(sums.loss) ? "the model's weights are no longer finite"
                                                     : fmt::format("the {} loss is {}", what, sums.loss);
  throw Error(fmt::format("epoch {}, step {}: {} (the training diverged); nothing after the last checkpoint was "
                          "saved, and the checkpoints are intact: continue with --resume and a lower "
                          "training.optimizer.lr, or set training.grad_clip",
                          epoch, state_.step, found));
}

// A checkpoint after step `epoch_step` of the epoch (output.checkpoint_every_steps): the epoch's
// training sums so far, reduced over the ranks, go with it (a resumed run starts from them).
void Trainer::save_inside_epoch(int64_t epoch_step, const MetricSums& sums) {
  std::vector<double> v = sums.pack();
  comm_.allreduce_sum(v.data(), v.size());
  MetricSums total;
  total.unpack(v);
  stop_if_diverged(total, "training", state_.epoch + 1);
  state_.epoch_step = epoch_step;
  state_.epoch_sums = v;
  state_.elapsed_seconds += since(start_);
  start_ = std::chrono::steady_clock::now();
  save_checkpoint(false);
  state_.epoch_sums.clear();
  comm_.barrier();
}

void Trainer::group_as_training(BatchTensors& t, std::optional<DeviceValueChecksPaused>& trusted) const {
  if (!grouping_) return;
  if (t.center_groups.empty()) t = group_batch(t, *grouping_);
  trusted.emplace();
}

MetricSums Trainer::validate() {
  swap_ema();
  MetricSums sums;
  const Prefactors limits = schedule_->limits();
  // Validation frames split across ranks by index (rank r: r, r + size, ...), in parts of 8, with
  // no list of them; sums reduced: exact, nothing counted twice.
  const std::size_t n = data_.validation->size(), rank = comm_.rank(), ranks = comm_.size();
  const std::size_t mine = n > rank ? (n - rank + ranks - 1) / ranks : 0, chunk = 8;
  const std::size_t n_parts = (mine + chunk - 1) / chunk;
  const auto prefetch = batches_of(*data_.validation, resident_validation_, n_parts, [=](std::size_t a) {
    std::vector<int64_t> part;
    for (std::size_t t = a * chunk; t < std::min(mine, (a + 1) * chunk); ++t) part.push_back(static_cast<int64_t>(rank + t * ranks));
    return part;
  });
  // A multi-head model: each head's errors too (its frames' labels alone).
  const std::size_t heads = model_heads(model_.metadata.hyperparameters).size();
  std::vector<MetricSums> by_head(heads);
  MetricTotals totals;   // summed on the device, read once
  for (std::size_t a = 0; a < n_parts; ++a) {
    BatchTensors t = to_device(prefetch->next(), device_);
    std::optional<DeviceValueChecksPaused> trusted;
    group_as_training(t, trusted);
    const Prediction p = predict(model_.module, t, /*create_graph=*/false, accumulate_);
    loss_terms(p, t, limits, config_.loss, config_.huber_delta, 1.0, nullptr, &totals);
    for (std::size_t h = 0; h < heads && t.head.defined(); ++h)
      loss_terms(p, frames_of_head(t, int64_t(h)), limits, config_.loss, config_.huber_delta, 1.0, &by_head[h]);
  }
  swap_ema();
  sums = totals.read();
  std::vector<double> v = sums.pack();   // one reduction for all of them
  const auto k = static_cast<std::ptrdiff_t>(v.size());
  for (const MetricSums& m : by_head)
    for (double x : m.pack()) v.push_back(x);
  comm_.allreduce_sum(v.data(), v.size());
  sums.unpack({v.begin(), v.begin() + k});
  for (std::size_t h = 0; h < heads; ++h)
    by_head[h].unpack({v.begin() + k * std::ptrdiff_t(h + 1), v.begin() + k * std::ptrdiff_t(h + 2)});
  validation_by_head_ = by_head;
  return sums;
}

void Trainer::run(bool resume, int64_t stop_after_epochs) {
  start_ = std::chrono::steady_clock::now();
  const bool any = !checkpoint::epoch_folders(checkpoint_dir()).empty();
  if (any && !resume) {
    throw Error(config_.output_dir + ": holds checkpoints of an earlier run; pass --resume to continue it, or "
                "choose another output.dir (nothing is overwritten)");
  }
  const std::string latest = resume ? newest_intact_checkpoint() : std::string();
  if (resume && latest.empty()) {
    throw Error(config_.output_dir + (any ? ": --resume given but no checkpoint is intact (see above)"
                                          : ": --resume given but no checkpoint found"));
  }
  comm_.barrier();
  setup_device();
  setup_model_and_statistics();
  if (!latest.empty()) {
    load_checkpoint(latest);
    log(fmt::format("resumed from {} (epoch {}, step {})", latest, state_.epoch, state_.step));
    repair_after_resume(latest);
  }
  start_outputs();
  const int64_t run_start_epoch = state_.epoch;
  while (state_.epoch < config_.epochs) {
    if (stop_after_epochs > 0 && state_.epoch - run_start_epoch >= stop_after_epochs) {
      report_profile();
      log(fmt::format("stopping after {} epoch(s) as asked; continue with --resume", stop_after_epochs));
      comm_.barrier();
      return;
    }
    const MetricSums train = train_epoch();
    ++state_.epoch;
    if (!end_epoch(train)) break;
  }
  report_profile();
  finish_outputs();
  comm_.barrier();
}

// The run folder and metrics.csv (kept across resumes), and the run's first log line.
void Trainer::start_outputs() {
  const fs::path out = config_.output_dir;
  if (comm_.is_root()) fs::create_directories(out);
  const std::string csv_path = (out / "metrics.csv").string();
  if (comm_.is_root() && !fs::exists(csv_path)) {
    std::ofstream(csv_path) << "epoch,step,elapsed_s,lr,train_loss,val_loss,val_energy_rmse_eV_per_atom,"
                               "val_force_rmse_eV_per_A,val_virial_rmse_eV_per_atom\n";
  }
  int64_t n_parameters = 0;
  for (const auto& p : params_) n_parameters += p.numel();
  log(fmt::format("training {} ({} parameters, {} gradient bucket(s)) on {} rank(s), {} steps per epoch",
                  config_.model.architecture, n_parameters, reducer_->buckets(), comm_.size(),
                  (sampler_->batches_per_epoch() + config_.accumulate - 1) / config_.accumulate));
}

// After an epoch's training steps: validation, schedule, best, log lines, metrics.csv, the
// checkpoint. Returns false when the run should stop (early stopping, max_minutes).
bool Trainer::end_epoch(const MetricSums& train) {
  stop_if_diverged(train, "training", state_.epoch);
  std::string refit;
  if (config_.refit_energy_shift && config_.refit_frames > 0) {
    const std::vector<int64_t> sample = refit_sample();
    swap_ema();   // the weights validated and exported
    const std::string change = refit_energy_shift(sample);
    swap_ema();
    if (!change.empty()) refit = fmt::format("  energy shift re-fitted before this validation, on {} training frames (eV):{}", sample.size(), change);
  }
  const MetricSums val = validate();
  stop_if_diverged(val, "validation", state_.epoch);
  state_.elapsed_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  start_ = std::chrono::steady_clock::now();
  const double metric = val.frames > 0 ? val.loss / val.frames : train.loss / std::max(train.frames, 1.0);
  if (schedule_->end_epoch(metric)) {
    log(fmt::format("lr_schedule plateau: no improvement for {} epochs, learning rate now {:.3g}",
                    config_.schedule.patience + 1, schedule_->lr(state_.step)));
  }
  const bool best = metric < state_.best_metric;
  if (best) {
    state_.best_metric = metric;
    state_.best_epoch = state_.epoch;
    state_.epochs_without_improvement = 0;
  } else {
    ++state_.epochs_without_improvement;
  }
  log(fmt::format("epoch {}/{} step {} | val E {} meV/atom  F {} meV/A  V {} meV/atom | loss {:.4g}{} | {}",
                  state_.epoch, config_.epochs, state_.step, milli(val.energy_rmse(), 2), milli(val.forces_rmse(), 1),
                  milli(val.virial_rmse(), 2), metric, best ? " *" : "", format_duration(state_.elapsed_seconds)));
  if (!validation_by_head_.empty()) {
    const std::vector<std::string> names = model_heads(model_.metadata.hyperparameters);
    std::string text;
    for (std::size_t h = 0; h < validation_by_head_.size(); ++h) {
      const MetricSums& m = validation_by_head_[h];
      text += fmt::format("{} {}: E {} F {} V {}", text.empty() ? "" : " |", names[h], milli(m.energy_rmse(), 2),
                          milli(m.forces_rmse(), 1), milli(m.virial_rmse(), 2));
    }
    log("  val by head (meV/atom, meV/A, meV/atom):" + text);
  }
  if (!refit.empty()) log(refit);
  const double tt = std::max(times_.wall, 1e-12);
  if (recorded_ && recorded_->recording()) {
    // The host launches the replays and does not wait for them: its times are not the GPU's.
    log(fmt::format("  throughput {:.2f} frames/s | step time not split (training.cuda_graph: recorded steps)",
                    train.frames / tt));
  } else {
    log(fmt::format("  throughput {:.2f} frames/s | step time{}: model {:.1f}%, optimizer {:.1f}%, data {:.1f}%, "
                    "communication {:.1f}%, other {:.1f}% (outside model and optimizer: {:.1f}%)",
                    train.frames / tt, clock_.on_device() ? " (the GPU stream's)" : "", 100 * times_.model / tt,
                    100 * times_.optimizer / tt, 100 * times_.data / tt,
                    100 * times_.communication / tt, 100 * times_.other() / tt,
                    100 * (times_.data + times_.communication + times_.other()) / tt));
  }
  log_memory();
  if (comm_.is_root()) {
    const fs::path csv = fs::path(config_.output_dir) / "metrics.csv";
    std::ofstream out(csv, std::ios::app);
    out << fmt::format("{},{},{:.1f},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g},{:.6g}\n", state_.epoch, state_.step,
                       state_.elapsed_seconds, schedule_->lr(state_.step), train.loss / std::max(train.frames, 1.0),
                       metric, val.energy_rmse(), val.forces_rmse(), val.virial_rmse());
    out.flush();
    if (!out) throw Error(csv.string() + ": cannot append this epoch's metrics (disk full?)");
  }
  save_checkpoint(best);
  comm_.barrier();
  if (config_.early_stopping_patience > 0 && state_.epochs_without_improvement >= config_.early_stopping_patience) {
    log(fmt::format("early stop: no improvement for {} epochs", state_.epochs_without_improvement));
    return false;
  }
  if (config_.max_minutes > 0 && state_.elapsed_seconds > 60.0 * config_.max_minutes) {
    log(fmt::format("stopping: training.max_minutes = {} reached", config_.max_minutes));
    return false;
  }
  return true;
}

// The epoch's memory on rank 0: the process's peak resident set (a run whose memory grows from
// epoch to epoch shows here) and, on a GPU, the most LibTorch's tensors held in this epoch.
void Trainer::log_memory() const {
  const int64_t rss = peak_resident_bytes();
  std::string line = rss < 0 ? "  memory: peak resident n/a" : "  memory: peak resident " + gib(rss) + " so far";
  if (const auto m = device_memory(device_))
    line += fmt::format("; {}: peak {} in tensors this epoch (of {})", device_.str(), gib(m->peak), gib(m->total));
  log(line);
}

// The exported model (best checkpoint, EMA weights when enabled, with provenance) and the
// held-out frames, so that `mlip-trainer test` can be run on exactly them.
void Trainer::finish_outputs() {
  if (!comm_.is_root()) return;
  const fs::path out = config_.output_dir;
  const fs::path best = fs::path(checkpoint_dir()) / "best";
  const std::string path = (out / "model.pt").string();
  export_checkpoint(best.string(), path,
                    {{"best_epoch", state_.best_epoch},
                     {"steps", state_.step},
                     {"train_frames", data_.train->size()},
                     {"validation_frames", data_.validation->size()}});
  log(fmt::format("exported {} (best epoch {})", path, state_.best_epoch));
  const FrameSource& validation = *data_.validation;
  if (validation.size() == 0) return;
  if (validation.streamed()) {
    log("validation frames: read from the pack(s), not written out (data.split_seed chooses them again)");
    return;
  }
  std::vector<int64_t> all(validation.size());
  std::iota(all.begin(), all.end(), 0);
  std::vector<Frame> storage;
  std::vector<Structure> frames;
  frames.reserve(validation.size());
  for (const Frame* f : validation.frames(all, storage)) frames.push_back(f->structure);
  const std::string vpath = (out / "validation.xyz").string();
  write_extxyz(vpath + ".tmp", frames);
  fs::rename(vpath + ".tmp", vpath);
  log(fmt::format("wrote {} ({} validation frames; mlip-trainer test {} {})", vpath, frames.size(), path, vpath));
}

}  // namespace mlip::trainer
