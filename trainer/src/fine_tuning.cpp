// Fine-tuning (training.init_from, training.freeze): a new run that starts from a trained model's
// weights. The config must describe the same model (architecture, cutoff, hyperparameters);
// species may be added (their entries start from the fresh initialisation, their statistics
// from the new data) or dropped, and a multi-head model's heads kept, dropped or added (a new
// head starts from the source's default head: mace-torch's multi-head fine-tuning, where the
// replay data of the kept heads trains beside the new data, each source naming its head).
#include <filesystem>
#include <map>
#include <memory>
#include <optional>

#include <fmt/format.h>

#include "mlip/error.h"
#include "mlip/ops/operators.h"
#include "prefetch.h"
#include "training.h"

namespace mlip::trainer {
namespace fs = std::filesystem;

namespace {

struct WeightSource {
  ModelMetadata metadata;
  std::map<std::string, torch::Tensor> weights;
};

WeightSource read_source(const std::string& path) {
  if (fs::is_directory(path)) {
    Trainable t = read_checkpoint(path);
    return {t.metadata, named_weights(t.module)};
  }
  const Model model = Model::load(path);    // checks the file's digest first
  if (model.info().compressed)
    throw Error("training.init_from: " + path + " is a compressed model: start from the model it was compressed "
                "from, or its checkpoint folder");
  WeightSource source{model.metadata(), read_model_weights(path)};
  if (source.weights.empty()) {
    const auto& from = source.metadata.provenance;
    throw Error("training.init_from: " + path + " carries no weights for fine-tuning (written by an older mlip): "
                "start from its checkpoint folder" +
                (from.contains("exported_from") ? " (" + from["exported_from"].get<std::string>() + ")" : ""));
  }
  return source;
}

// What makes the source another model than the config's: "key: config's (source's)" each.
std::vector<std::string> differences(const ModelMetadata& source, const ModelMetadata& target) {
  std::vector<std::string> out;
  if (source.architecture != target.architecture)
    out.push_back(fmt::format("model.architecture: {} (source {})", target.architecture, source.architecture));
  if (source.cutoff != target.cutoff)
    out.push_back(fmt::format("model.cutoff: {} (source {})", target.cutoff, source.cutoff));
  // Hyperparameters as resolved by the builders (defaults filled in); the repulsion prior's
  // radii come from data.
  nlohmann::json a = source.hyperparameters, b = target.hyperparameters;
  for (auto* h : {&a, &b})
    for (const char* key : {"repulsion", "heads", "head"}) h->erase(key);   // heads: mapped by name
  for (const auto& [key, value] : b.items())
    if (!a.contains(key) || a[key] != value)
      out.push_back(fmt::format("model.hyperparameters.{}: {} (source {})", key, value.dump(),
                                a.contains(key) ? a[key].dump() : "absent"));
  for (const auto& [key, value] : a.items())
    if (!b.contains(key)) out.push_back(fmt::format("model.hyperparameters.{}: absent (source {})", key, value.dump()));
  return out;
}

std::string joined(const std::vector<std::string>& words, const char* sep = " ") {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : sep) + w;
  return s;
}

}  // namespace

void Trainer::init_from_source() {
  const std::string& path = config_.init_from;
  const WeightSource source = read_source(path);
  const std::vector<std::string> diff = differences(source.metadata, model_.metadata);
  if (!diff.empty())
    throw Error(config_.file + ": training.init_from " + path + " is not the model this config describes (" +
                joined(diff, "; ") + "): fine-tuning needs the same architecture, cutoff and hyperparameters");
  std::vector<std::string> added;
  try {
    added = transfer_weights(model_, source.weights, source.metadata);
  } catch (const Error& e) {
    throw Error("training.init_from " + path + ": " + e.what());
  }
  log(fmt::format("init_from {}: weights of species {} from it{}", path, joined(source.metadata.species),
                  added.empty() ? "" : "; new species " + joined(added) + " start from a fresh initialisation"));
  log_heads(source.metadata);
  model_.metadata.provenance["init_from"] = fs::absolute(path).string();
  if (config_.freeze == "descriptor") freeze_descriptor();
}

// Which source head each head of a multi-head model starts from.
void Trainer::log_heads(const ModelMetadata& source) const {
  const std::vector<std::string> heads = model_heads(model_.metadata.hyperparameters);
  const std::vector<std::string> from = model_heads(source.hyperparameters);
  if (heads.empty()) return;
  std::vector<std::string> text;
  for (const auto& h : heads) {
    const bool same = std::find(from.begin(), from.end(), h) != from.end();
    const std::string origin = same ? h : from.empty() ? "the single head" : from[default_head(source.hyperparameters)];
    text.push_back(fmt::format("{} from {}{}", h, origin, same ? "" : " (new)"));
  }
  log("init_from: heads: " + joined(text, ", "));
}

// The energy shift re-fitted by least squares to what the model leaves unexplained on the
// training frames `frames` (per species: shift += the residuals' fit, per atom as the loss weighs
// them; a multi-head model's per head, from that head's frames): at the start of a fine-tuning
// (all frames), so that a new DFT reference or a new species does not first have to be learnt
// through the nets, and at each validation (a sample), so that a constant per atom the nets drift
// to while the forces dominate the loss (MACE, whose layers have no biases) is not carried by
// the energies. The ranks share the frames (r, r + size, ...) and sum the normal equations.
// Returns the changes for the log (" O+0.01 H+0.02", per head "new: ...; pt: ..."; "": no frame
// with an energy). `note_heads` (a pass over all training frames of a multi-head model): each
// head's frames are noted in frames_of_head_, for refit_sample().
std::string Trainer::refit_energy_shift(const std::vector<int64_t>& frames, bool note_heads) {
  const std::vector<std::string> heads = model_heads(model_.metadata.hyperparameters);
  const auto ns = static_cast<int64_t>(config_.model.species.size());
  const auto nh = static_cast<int64_t>(std::max<std::size_t>(heads.size(), 1));
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64).device(device_);
  torch::Tensor a = torch::zeros({nh, ns, ns}, f64), b = torch::zeros({nh, ns}, f64);
  auto mine = std::make_shared<std::vector<int64_t>>();
  for (std::size_t k = comm_.rank(); k < frames.size(); k += comm_.size()) mine->push_back(frames[k]);
  constexpr std::size_t part = 8;
  const auto prefetch = batches_of(*data_.train, resident_train_, (mine->size() + part - 1) / part, [=](std::size_t p) {
    return std::vector<int64_t>(mine->begin() + p * part, mine->begin() + std::min(mine->size(), (p + 1) * part));
  });
  note_heads = note_heads && !heads.empty();
  std::vector<double> head_of(note_heads ? data_.train->size() : 0, 0.0);   // 1 + each frame's head
  for (std::size_t p = 0; p < (mine->size() + part - 1) / part; ++p) {
    BatchTensors t = to_device(prefetch->next(), device_);
    if (note_heads && t.head.defined()) {
      const torch::Tensor h = torch::zeros({t.n_frames}, t.head.options()).index_copy(0, t.frame_of_atom, t.head).cpu();
      const auto of_frame = h.accessor<int64_t, 1>();
      for (int64_t k = 0; k < t.n_frames; ++k)
        head_of[static_cast<std::size_t>((*mine)[p * part + static_cast<std::size_t>(k)])] = 1.0 + double(of_frame[k]);
    }
    std::optional<DeviceValueChecksPaused> trusted;
    group_as_training(t, trusted);
    add_shift_equations(t, predict_energy(model_.module, t, accumulate_), a, b);
  }
  if (note_heads) {
    comm_.allreduce_sum(head_of.data(), head_of.size());
    frames_of_head_.assign(heads.size(), {});
    for (std::size_t k = 0; k < head_of.size(); ++k)
      if (head_of[k] >= 1) frames_of_head_[static_cast<std::size_t>(head_of[k]) - 1].push_back(static_cast<int64_t>(k));
  }
  torch::Tensor sums = torch::cat({a.flatten(), b.flatten()}).cpu().contiguous();
  comm_.allreduce_sum(sums.data_ptr<double>(), static_cast<std::size_t>(sums.numel()));
  a = sums.narrow(0, 0, nh * ns * ns).view({nh, ns, ns});
  b = sums.narrow(0, nh * ns * ns, nh * ns).view({nh, ns});
  torch::NoGradGuard no_grad;
  std::string text;
  for (int64_t h = 0; h < nh; ++h) {
    if (a[h].abs().sum().item<double>() == 0) continue;   // no frame of it with an energy
    const std::vector<double> delta = min_norm_solution(a[h], b[h]);
    torch::Tensor shift = model_.module.attr("energy_shift").toTensor();
    if (!heads.empty()) shift = shift.select(1, h);
    shift += torch::tensor(delta, torch::kFloat64).to(shift.options());
    text += heads.empty() ? "" : (text.empty() ? " " : "; ") + heads[static_cast<std::size_t>(h)] + ":";
    for (std::size_t s = 0; s < delta.size(); ++s) text += fmt::format(" {}{:+.6g}", config_.model.species[s], delta[s]);
  }
  return text;
}

// The frames of the re-fit at each validation: an even sample of training.refit_frames of the
// training frames; a multi-head model's, of each head's (a small new head beside much replay
// data gets as many as the others).
std::vector<int64_t> Trainer::refit_sample() const {
  std::vector<int64_t> idx;
  const auto even = [&](std::size_t n, const auto& frame) {
    const std::size_t k = std::min<std::size_t>(n, static_cast<std::size_t>(config_.refit_frames));
    for (std::size_t i = 0; i < k; ++i) idx.push_back(frame(i * n / k));
  };
  if (frames_of_head_.empty()) even(data_.train->size(), [](std::size_t j) { return static_cast<int64_t>(j); });
  for (const std::vector<int64_t>& frames : frames_of_head_) even(frames.size(), [&](std::size_t j) { return frames[j]; });
  return idx;
}

void Trainer::freeze_descriptor() {
  std::vector<std::string> names(model_.descriptor.begin(), model_.descriptor.end());
  if (names.empty())
    throw Error("training.freeze: descriptor: a " + model_.metadata.architecture +
                " model marks no parameters as its descriptor: nothing would be kept (use freeze: none)");
  for (const auto& name : names) model_.module.attr(name).toTensor().requires_grad_(false);
  log(fmt::format("freeze: descriptor parameters kept as they are ({}); the rest is trained", joined(names)));
}

}  // namespace mlip::trainer
