#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "mlip/error.h"
#include "training.h"

namespace mlip::trainer {

namespace {

// A label the loss weights (its prefactor's start or limit > 0) but some frames of a source lack:
// one warning line per source and label, with the count.
void warn_missing_labels(const std::string& source, const FrameSource& frames, const Config& c,
                         const std::function<void(const std::string&)>& log) {
  const PackStats& st = frames.stats();
  const std::size_t n = frames.size();
  auto weighted = [](const PrefactorConfig& p) { return p.start > 0 || p.limit > 0; };
  for (auto [label, labelled, used] : {std::tuple{"energies", st.energy_frames, weighted(c.energy)},
                                       {"forces", st.force_frames, weighted(c.forces)},
                                       {"virials", st.virial_frames, weighted(c.virial)}}) {
    if (used && labelled < n) {
      log(fmt::format("WARNING: {}: {} of {} frames have no {}, which the loss weights (training.loss): those "
                      "frames add nothing to that term",
                      source, n - labelled, n, label));
    }
  }
}

}  // namespace

std::shared_ptr<FrameSource> open_source(const DataSource& src, double cutoff, const std::string& cache_dir,
                                         const std::vector<std::string>& model_species,
                                         const std::function<void(const std::string&)>& log, bool stream_by_default) {
  if (src.format == "pack" || (src.format == "auto" && is_pack(src.path))) {
    check_pack_units(src.units, src.path);
    auto pack = pack_source(src.path, src.weight, cutoff, src.head);
    const SpeciesMap species(model_species);   // the manifest's elements against the model's, named
    for (std::size_t z = 1; z < pack->stats().atoms_by_z.size(); ++z)
      if (pack->stats().atoms_by_z[z] > 0) species.index(static_cast<int>(z), "pack " + src.path);
    log(fmt::format("data: {}: a pack of {} frames, streamed (each batch read when it is needed)", src.path, pack->size()));
    return pack;
  }
  if (src.stream.value_or(stream_by_default)) {
    ReadOptions read;
    read.units = src.units;
    std::unique_ptr<FrameReader> reader = open_frame_reader(src.path, src.format, read);
    if (reader) {
      auto source = reader_source(std::move(reader), src.weight, cutoff, src.head);
      log(fmt::format("data: {}: {} frames, streamed (read by index; statistics from one pass)", src.path, source->size()));
      return source;
    }
    if (src.stream.value_or(false)) {
      throw Error(src.path + ": stream: true, but its format (" + (src.format == "auto" ? detect_format(src.path) : src.format) +
                  ") is not read by index: pack it (mlip-trainer pack), or stream extended XYZ, ASE databases and MACE HDF5");
    }
  }
  DatasetOptions opts;
  opts.format = src.format;
  opts.read.units = src.units;
  opts.cutoff = cutoff;
  opts.cache_dir = cache_dir;
  std::string note;
  std::vector<Frame> frames = load_frames(src.path, opts, &note);
  log(note);
  for (Frame& f : frames) {
    f.structure.weight *= src.weight;
    f.head = src.head;
  }
  return memory_source(std::move(frames));
}

namespace {

std::shared_ptr<FrameSource> load_sources(const std::vector<DataSource>& sources, const Config& c,
                                          const std::function<void(const std::string&)>& log) {
  std::vector<std::shared_ptr<FrameSource>> parts;
  for (const auto& src : sources) {
    parts.push_back(open_source(src, c.model.cutoff, c.cache_dir, c.model.species, log, false));
    warn_missing_labels(src.path, *parts.back(), c, log);
  }
  return concat_sources(std::move(parts));
}

}  // namespace

DataSplit load_data(const Config& c, const std::function<void(const std::string&)>& log) {
  DataSplit split;
  std::shared_ptr<FrameSource> all = load_sources(c.train, c, log);
  if (!c.validation.empty()) {
    split.train = all;
    split.validation = load_sources(c.validation, c, log);
  } else {
    const uint64_t n = all->size();
    const auto n_val = static_cast<uint64_t>(std::llround(c.validation_fraction * n));
    if (n_val == 0 || n_val >= n) {
      throw Error(c.file + ": data.validation_fraction " + std::to_string(c.validation_fraction) + " of " +
                  std::to_string(n) + " frames leaves no training or no validation frame");
    }
    // The validation frames are the first n_val of a permutation seeded by split_seed, the
    // training frames the rest: no list of indices, whatever the size of the data.
    const Permutation split_order(n, c.split_seed);
    if (all->streamed()) {
      log("data: statistics (energy shift, force scale, shortest distances) from every frame of the packs, the "
          "validation frames split off them included");
    }
    split.train = subset_source(all, split_order, n_val, n - n_val);
    split.validation = subset_source(all, split_order, 0, n_val);
  }
  if (split.train->size() == 0) throw Error(c.file + ": no training frames");
  return split;
}

Sampler::Sampler(const FrameSource& frames, int64_t batch_frames, int64_t batch_atoms, uint64_t seed, int threads)
    : frames_(frames), batch_frames_(batch_frames), batch_atoms_(batch_atoms), seed_(seed), threads_(std::max(1, threads)) {}

namespace {

// out[k] = frames.atoms(order(first + k)) for every k, on `threads` threads, each a contiguous
// range. The entries are independent: each thread's lookups overlap in memory, where one loop
// that also forms the batches would wait on each in turn. The first entry is looked up here
// first, so that a source reading its counts on first use does so on this thread; where a thread
// cannot be started, this one takes its range. The first error, in entry order, is rethrown.
void atoms_in_order(const FrameSource& frames, const Permutation& order, uint64_t first, std::vector<uint32_t>& out,
                    int threads) {
  const auto fill = [&](std::size_t a, std::size_t b) {
    for (std::size_t k = a; k < b; ++k) out[k] = static_cast<uint32_t>(frames.atoms(order(first + k)));
  };
  const std::size_t n = out.size();
  if (n == 0) return;
  fill(0, 1);
  const auto parts = static_cast<std::size_t>(n < 4096 ? 1 : std::max(1, threads));
  const auto range = [&](std::size_t t) { return std::pair{std::max<std::size_t>(1, n * t / parts), n * (t + 1) / parts}; };
  std::vector<std::exception_ptr> errors(parts);
  const auto run = [&](std::size_t t) {
    try {
      fill(range(t).first, range(t).second);
    } catch (...) {
      errors[t] = std::current_exception();
    }
  };
  std::vector<std::thread> pool;
  std::size_t started = 1;
  try {
    for (; started < parts; ++started) pool.emplace_back(run, started);
  } catch (const std::system_error&) {   // no more threads: the rest run here
  }
  run(0);
  for (std::size_t t = started; t < parts; ++t) run(t);
  for (std::thread& th : pool) th.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace

EpochBatches Sampler::epoch_batches(int64_t epoch) const {
  if (epoch0_) {
    std::optional<EpochBatches> kept = std::exchange(epoch0_, std::nullopt);
    if (epoch == 0) return std::move(*kept);
  }
  EpochBatches b;
  b.order = Permutation(frames_.size(), seed_ * 1000003ull + static_cast<uint64_t>(epoch));
  if (batch_atoms_ <= 0) {
    b.batch_frames = batch_frames_;
    return b;
  }
  // The epoch's atom counts in its order, a block at a time (found on the threads), then
  // greedy batches in that order: a frame starts a new batch where it would overflow this one.
  constexpr uint64_t kBlock = uint64_t{1} << 18;
  const uint64_t n = b.order.size();
  std::vector<uint32_t> atoms;
  b.starts.push_back(0);
  int64_t in_batch = 0, sum = 0;
  for (uint64_t j0 = 0; j0 < n; j0 += kBlock) {
    atoms.resize(std::min(kBlock, n - j0));
    atoms_in_order(frames_, b.order, j0, atoms, threads_);
    for (std::size_t k = 0; k < atoms.size(); ++k) {
      if (in_batch > 0 && sum + atoms[k] > batch_atoms_) {
        b.starts.push_back(static_cast<int64_t>(j0 + k));
        in_batch = 0;
        sum = 0;
      }
      ++in_batch;
      sum += atoms[k];
    }
  }
  if (in_batch > 0) b.starts.push_back(static_cast<int64_t>(n));
  return b;
}

int64_t Sampler::batches_per_epoch() const {
  if (batch_atoms_ <= 0) return (static_cast<int64_t>(frames_.size()) + batch_frames_ - 1) / batch_frames_;
  if (!count_) {
    EpochBatches first = epoch_batches(0);
    count_ = static_cast<int64_t>(first.size());
    epoch0_ = std::move(first);
  }
  return *count_;
}

std::size_t EpochBatches::size() const {
  if (batch_frames > 0) return static_cast<std::size_t>((order.size() + batch_frames - 1) / batch_frames);
  return starts.empty() ? 0 : starts.size() - 1;
}

int64_t EpochBatches::start(std::size_t k) const {
  if (batch_frames > 0) return std::min(static_cast<int64_t>(k) * batch_frames, static_cast<int64_t>(order.size()));
  return starts[k];
}

std::vector<int64_t> EpochBatches::share(std::size_t k, int rank, int n_ranks) const {
  std::vector<int64_t> mine;
  for (int64_t j = start(k) + rank; j < start(k + 1); j += n_ranks) mine.push_back(static_cast<int64_t>(order(j)));
  return mine;
}

std::vector<double> fit_energy_shift(const PackStats& st, const SpeciesMap& species, std::size_t ns) {
  if (st.energy_frames == 0 || st.e0_numbers.empty()) return std::vector<double>(ns, 0.0);
  auto a = torch::zeros({static_cast<int64_t>(ns), static_cast<int64_t>(ns)}, torch::kFloat64);
  auto b = torch::zeros({static_cast<int64_t>(ns), 1}, torch::kFloat64);
  auto A = a.accessor<double, 2>();
  auto B = b.accessor<double, 2>();
  const std::size_t n = st.e0_numbers.size();
  std::vector<int64_t> row(n);
  for (std::size_t i = 0; i < n; ++i) row[i] = species.index(st.e0_numbers[i], "the training data");
  for (std::size_t i = 0; i < n; ++i) {
    B[row[i]][0] += st.counts_energy[i];
    for (std::size_t j = 0; j < n; ++j) A[row[i]][row[j]] += st.counts_counts[i][j];
  }
  // The minimum-norm solution where the counts are collinear. The normal equations' entries are
  // sums of integer products, exact in float64, so the null space is exact too.
  return min_norm_solution(a, b.squeeze(1));
}

std::vector<double> min_norm_solution(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = std::get<0>(torch::linalg_lstsq(a.to(torch::kCPU, torch::kFloat64),
                                                          b.to(torch::kCPU, torch::kFloat64).unsqueeze(1), 1e-10,
                                                          std::string("gelsd")))
                              .squeeze(1).contiguous();
  return {x.data_ptr<double>(), x.data_ptr<double>() + x.numel()};
}

void add_shift_equations(const BatchTensors& t, const torch::Tensor& predicted, torch::Tensor& a, torch::Tensor& b) {
  const int64_t ns = a.size(1), heads = a.size(0);
  const auto f64 = a.options();
  const torch::Tensor counts = torch::zeros({t.n_frames * ns}, f64)
                                   .index_add_(0, t.frame_of_atom * ns + t.species, torch::ones({t.n_atoms}, f64))
                                   .view({t.n_frames, ns});
  const torch::Tensor n = t.atoms_per_frame.to(f64);
  const torch::Tensor w = t.has_energy.to(f64) * t.weight.to(f64) / (n * n);
  const torch::Tensor r = torch::where(t.has_energy > 0, t.energy.to(f64) - predicted.to(f64), torch::zeros_like(w));
  torch::Tensor head = torch::zeros({t.n_frames, heads}, f64);   // each frame's head, one-hot
  if (t.head.defined() && heads > 1) {
    const torch::Tensor of_frame = torch::zeros({t.n_frames}, t.head.options()).index_copy(0, t.frame_of_atom, t.head);
    head.scatter_(1, of_frame.unsqueeze(1), 1.0);
  } else {
    head.select(1, 0).fill_(1.0);
  }
  a += torch::einsum("fh,fi,fj->hij", {head * w.unsqueeze(1), counts, counts});
  b += torch::einsum("fh,fi->hi", {head * (w * r).unsqueeze(1), counts});
}

double force_rms(const PackStats& st) {
  return st.force_components > 0 ? std::sqrt(st.force_squares / static_cast<double>(st.force_components)) : 0.0;
}

std::vector<double> shortest_by_species(const PackStats& st, const SpeciesMap& species, std::size_t ns, double cutoff) {
  std::vector<double> rmin(ns * ns, std::numeric_limits<double>::infinity());
  for (const auto& [zz, r] : st.shortest) {
    if (!(r < cutoff)) continue;
    const auto a = static_cast<std::size_t>(species.index(zz.first, "the training data"));
    const auto b = static_cast<std::size_t>(species.index(zz.second, "the training data"));
    rmin[a * ns + b] = rmin[b * ns + a] = r;
  }
  return rmin;
}

}  // namespace mlip::trainer
