#include <algorithm>
#include <numeric>
#include <tuple>

#include <fmt/format.h>

#include "mlip/error.h"
#include "training.h"

namespace mlip::trainer {

namespace {

// A label the loss weights (its prefactor's start or limit > 0) but some frames of a source lack:
// one warning line per source and label, with the count.
void warn_missing_labels(const std::string& source, const std::vector<Frame>& frames, const Config& c,
                         const std::function<void(const std::string&)>& log) {
  std::size_t no_energy = 0, no_forces = 0, no_virial = 0;
  for (const Frame& f : frames) {
    no_energy += f.structure.energy ? 0 : 1;
    no_forces += f.structure.has_forces() ? 0 : 1;
    no_virial += f.structure.virial ? 0 : 1;
  }
  auto weighted = [](const PrefactorConfig& p) { return p.start > 0 || p.limit > 0; };
  for (auto [label, missing, used] : {std::tuple{"energies", no_energy, weighted(c.energy)},
                                      {"forces", no_forces, weighted(c.forces)},
                                      {"virials", no_virial, weighted(c.virial)}}) {
    if (used && missing > 0) {
      log(fmt::format("WARNING: {}: {} of {} frames have no {}, which the loss weights (training.loss): those "
                      "frames add nothing to that term",
                      source, missing, frames.size(), label));
    }
  }
}

std::vector<Frame> load_sources(const std::vector<DataSource>& sources, const Config& c,
                                const std::function<void(const std::string&)>& log) {
  std::vector<Frame> all;
  for (const auto& src : sources) {
    DatasetOptions opts;
    opts.format = src.format;
    opts.read.units = src.units;
    opts.cutoff = c.model.cutoff;
    opts.cache_dir = c.cache_dir;
    std::string note;
    std::vector<Frame> frames = load_frames(src.path, opts, &note);
    log(note);
    warn_missing_labels(src.path, frames, c, log);
    for (Frame& f : frames) {
      f.structure.weight *= src.weight;
      all.push_back(std::move(f));
    }
  }
  return all;
}

}  // namespace

DataSplit load_data(const Config& c, const std::function<void(const std::string&)>& log) {
  DataSplit split;
  split.train = load_sources(c.train, c, log);
  if (!c.validation.empty()) {
    split.validation = load_sources(c.validation, c, log);
  } else {
    std::vector<std::size_t> order(split.train.size());
    std::iota(order.begin(), order.end(), 0);
    std::mt19937_64 rng(c.split_seed);
    std::shuffle(order.begin(), order.end(), rng);
    const auto n_val = static_cast<std::size_t>(std::llround(c.validation_fraction * split.train.size()));
    if (n_val == 0 || n_val >= split.train.size()) {
      throw Error(c.file + ": data.validation_fraction " + std::to_string(c.validation_fraction) + " of " +
                  std::to_string(split.train.size()) + " frames leaves no training or no validation frame");
    }
    std::vector<bool> is_val(split.train.size(), false);
    for (std::size_t k = 0; k < n_val; ++k) is_val[order[k]] = true;
    std::vector<Frame> train;
    for (std::size_t i = 0; i < split.train.size(); ++i) {
      (is_val[i] ? split.validation : train).push_back(std::move(split.train[i]));
    }
    split.train = std::move(train);
  }
  if (split.train.empty()) throw Error(c.file + ": no training frames");
  return split;
}

Sampler::Sampler(const std::vector<Frame>& frames, int64_t batch_frames, int64_t batch_atoms, uint64_t seed)
    : frames_(frames), batch_frames_(batch_frames), batch_atoms_(batch_atoms), seed_(seed) {}

std::vector<std::vector<int64_t>> Sampler::epoch_batches(int64_t epoch) const {
  std::vector<int64_t> order(frames_.size());
  std::iota(order.begin(), order.end(), 0);
  std::mt19937_64 rng(seed_ * 1000003ull + static_cast<uint64_t>(epoch));
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<std::vector<int64_t>> batches;
  std::vector<int64_t> current;
  int64_t atoms = 0;
  for (int64_t k : order) {
    const auto n = static_cast<int64_t>(frames_[k].structure.size());
    const bool full = batch_atoms_ > 0 ? (!current.empty() && atoms + n > batch_atoms_)
                                       : static_cast<int64_t>(current.size()) == batch_frames_;
    if (full) {
      batches.push_back(std::move(current));
      current.clear();
      atoms = 0;
    }
    current.push_back(k);
    atoms += n;
  }
  if (!current.empty()) batches.push_back(std::move(current));
  return batches;
}

int64_t Sampler::batches_per_epoch() const { return static_cast<int64_t>(epoch_batches(0).size()); }

std::vector<int64_t> rank_share(const std::vector<int64_t>& global_batch, int rank, int size) {
  std::vector<int64_t> mine;
  for (std::size_t j = rank; j < global_batch.size(); j += size) mine.push_back(global_batch[j]);
  return mine;
}

std::vector<double> fit_energy_shift(const std::vector<Frame>& frames, const SpeciesMap& species, std::size_t ns,
                                     const std::vector<double>* predicted) {
  std::vector<double> counts, energies;
  for (std::size_t k = 0; k < frames.size(); ++k) {
    const Frame& f = frames[k];
    if (!f.structure.energy) continue;
    std::vector<double> row(ns, 0.0);
    for (int z : f.structure.numbers) row[species.index(z, f.structure.origin)] += 1.0;
    counts.insert(counts.end(), row.begin(), row.end());
    energies.push_back(*f.structure.energy - (predicted ? (*predicted)[k] : 0.0));
  }
  if (energies.empty()) return std::vector<double>(ns, 0.0);
  const auto m = static_cast<int64_t>(energies.size());
  const auto a = torch::from_blob(counts.data(), {m, static_cast<int64_t>(ns)}, torch::kFloat64).clone();
  const auto b = torch::from_blob(energies.data(), {m, 1}, torch::kFloat64).clone();
  // gelsd: SVD-based, gives the minimum-norm solution when the counts are collinear.
  const auto x = std::get<0>(torch::linalg_lstsq(a, b, c10::nullopt, std::string("gelsd")));
  std::vector<double> shift(ns);
  for (std::size_t s = 0; s < ns; ++s) shift[s] = x[s][0].item<double>();
  return shift;
}

double force_rms(const std::vector<Frame>& frames) {
  double sum = 0, n = 0;
  for (const Frame& f : frames)
    for (const auto& v : f.structure.forces) {
      sum += v[0] * v[0] + v[1] * v[1] + v[2] * v[2];
      n += 3;
    }
  return n > 0 ? std::sqrt(sum / n) : 0.0;
}

}  // namespace mlip::trainer
