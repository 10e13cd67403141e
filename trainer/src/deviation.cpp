// `mlip-trainer deviation`: a committee's model deviation on the frames of a data file, and the
// frames worth labelling (DP-GEN's trust levels on the largest force deviation).
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include <fmt/format.h>

#include "mlip/model/deviation.h"
#include "mlip/error.h"
#include "mlip/data/io.h"
#include "training.h"

namespace mlip::trainer {
namespace fs = std::filesystem;

namespace {

// One committee member's forces (n x 3), virial (9) and energy on a frame, in float64.
struct MemberResult {
  std::vector<double> forces;
  double virial[9] = {0.0};
  double energy = 0.0;
};

MemberResult evaluate_member(const Model& model, const Frame& frame) {
  const SpeciesMap species(model.info().species);
  const BatchTensors t = to_tensors(make_batch({&frame}, species), torch::kFloat64);
  const Prediction p = evaluate_as_lammps(model, t);
  MemberResult r;
  const torch::Tensor f = p.forces.detach().to(torch::kFloat64).contiguous();
  r.forces.assign(f.data_ptr<double>(), f.data_ptr<double>() + f.numel());
  const torch::Tensor w = p.virial.detach().to(torch::kFloat64).contiguous();
  std::copy(w.data_ptr<double>(), w.data_ptr<double>() + 9, r.virial);
  r.energy = p.energy.sum().item<double>();
  return r;
}

// The 7 columns after the frame index (pair_style mlip's order).
std::array<double, 7> frame_deviation(const std::vector<MemberResult>& results, std::size_t n_atoms,
                                      double relative) {
  const int k = static_cast<int>(results.size());
  const int64_t n = static_cast<int64_t>(n_atoms);
  std::vector<double> forces, virials, energies, atom(n_atoms);
  for (const auto& r : results) {
    forces.insert(forces.end(), r.forces.begin(), r.forces.end());
    virials.insert(virials.end(), r.virial, r.virial + 9);
    energies.push_back(r.energy);
  }
  atom_force_deviation(forces.data(), k, n, 3 * n, relative, atom.data());
  DeviationSummary f;
  for (double v : atom) f.add(v);
  const DeviationSummary v = virial_deviation(virials.data(), k, static_cast<double>(n));
  return {v.max, v.min, v.mean(), f.max, f.min, f.mean(), energy_deviation(energies.data(), k, static_cast<double>(n))};
}

std::ofstream open_tmp(const std::string& path) {
  std::ofstream out(path + ".tmp");
  if (!out) throw Error(path + ".tmp: cannot open for writing");
  return out;
}

void finish_tmp(std::ofstream& out, const std::string& path) {
  out.close();
  if (!out) throw Error(path + ".tmp: write failed");
  fs::rename(path + ".tmp", path);
}

}  // namespace

DeviationCounts model_deviation(const std::vector<std::string>& models, const std::string& data,
                                const DeviationOptions& options, const std::function<void(const std::string&)>& log) {
  if (models.size() < 2) throw Error("deviation: a committee needs two or more model files");
  if (options.trust_hi > 0.0 && options.trust_hi <= options.trust_lo)
    throw Error(fmt::format("deviation: --trust-hi ({}) must be above --trust-lo ({})", options.trust_hi,
                            options.trust_lo));
  std::vector<Model> committee;
  for (const auto& m : models) committee.push_back(Model::load(m));
  ReadOptions read;
  read.units = options.units;
  read.type_elements = options.type_elements;
  // Packs, extended XYZ and ASE databases are read frame by frame; other formats are parsed whole.
  std::function<Structure(std::size_t)> frame_at;
  std::size_t n_frames = 0;
  if (std::shared_ptr<FrameReader> by_index = open_frame_reader(data, options.format, read)) {
    n_frames = by_index->size();
    frame_at = [by_index](std::size_t k) { return by_index->frame(k); };
  } else {
    auto all = std::make_shared<std::vector<Structure>>(read_structures(data, options.format, read));
    n_frames = all->size();
    frame_at = [all](std::size_t k) { return (*all)[k]; };
  }
  log(fmt::format("{} models, {} frames from {}", committee.size(), n_frames, data));

  std::ofstream out = open_tmp(options.output);
  out << fmt::format("#{:>11} {:>18} {:>18} {:>18} {:>18} {:>18} {:>18} {:>18}\n", "frame", "max_devi_v",
                     "min_devi_v", "avg_devi_v", "max_devi_f", "min_devi_f", "avg_devi_f", "devi_e");
  // Candidates written as they are found, none held (a data set of any size).
  std::optional<ExtxyzWriter> picked;
  if (!options.candidates.empty()) picked.emplace(options.candidates);
  DeviationCounts counts;
  for (std::size_t k = 0; k < n_frames; ++k) {
    const Structure structure = frame_at(k);
    std::map<double, Frame> by_cutoff;    // one neighbour list per distinct cutoff
    std::vector<MemberResult> results;
    for (const Model& m : committee) {
      const double rc = m.info().cutoff;
      if (!by_cutoff.count(rc)) by_cutoff.emplace(rc, make_frame(structure, rc));
      results.push_back(evaluate_member(m, by_cutoff.at(rc)));
    }
    const auto c = frame_deviation(results, structure.size(), options.relative);
    out << fmt::format("{:>12}", k);
    for (double v : c) out << fmt::format(" {:>18.10e}", v);
    out << "\n";
    ++counts.frames;
    const double max_f = c[3];
    if (max_f < options.trust_lo) {
      ++counts.accurate;
    } else if (options.trust_hi > 0.0 && max_f >= options.trust_hi) {
      ++counts.failed;
    } else {
      ++counts.candidates;
      if (picked) picked->add(structure);
    }
  }
  finish_tmp(out, options.output);
  if (picked) picked->finish();
  return counts;
}

}  // namespace mlip::trainer
