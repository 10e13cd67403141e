// Fine-tuning (training.init_from, training.freeze): a new run that starts from a trained model's
// weights. The config must describe the same model (architecture, cutoff, hyperparameters);
// species may be added (their entries start from the fresh initialisation, their statistics
// from the new data) or dropped, and a multi-head model's heads kept, dropped or added (a new
// head starts from the source's default head: mace-torch's multi-head fine-tuning, where the
// replay data of the kept heads trains beside the new data, each source naming its head).
#include <filesystem>
#include <map>

#include <fmt/format.h>

#include "mlip/error.h"
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
  if (config_.refit_energy_shift) refit_energy_shift();
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

// The energy shift re-fitted by least squares to what the transferred model leaves unexplained on
// the new training data (per species: shift += the residual's fit; a multi-head model's per head,
// from that head's frames), so that a new DFT reference or a new species does not first have to
// be learnt through the nets.
void Trainer::refit_energy_shift() {
  // One pass over the training frames (streamed from a pack as they are read): the E0 sums of
  // the residuals E - E_model, in frame order, per head (-1: a model without heads).
  const FrameSource& train = *data_.train;
  std::map<int, PackStats> residuals;
  constexpr std::size_t batch = 16;
  std::vector<Frame> storage;
  for (std::size_t first = 0; first < train.size(); first += batch) {
    std::vector<int64_t> idx;
    for (std::size_t k = first; k < std::min(first + batch, train.size()); ++k) idx.push_back(static_cast<int64_t>(k));
    const std::vector<const Frame*> frames = train.frames(idx, storage);
    const BatchTensors t = to_tensors(make_batch(frames, *species_), dtype_);
    const torch::Tensor e = predict(model_.module, t, false).energy.detach().to(torch::kFloat64).contiguous();
    for (std::size_t k = 0; k < frames.size(); ++k) {
      const Structure& s = frames[k]->structure;
      if (!s.energy) continue;
      PackStats& r = residuals[frames[k]->head];
      ++r.energy_frames;
      r.add_energy(s, *s.energy - e[static_cast<int64_t>(k)].item<double>());
    }
  }
  const std::vector<std::string> heads = model_heads(model_.metadata.hyperparameters);
  torch::NoGradGuard no_grad;
  for (const auto& [head, r] : residuals) {
    const std::vector<double> delta = fit_energy_shift(r, *species_, config_.model.species.size());
    torch::Tensor shift = model_.module.attr("energy_shift").toTensor();
    if (head >= 0) shift = shift.select(1, head);
    std::string text;
    for (std::size_t s = 0; s < delta.size(); ++s) {
      shift[static_cast<int64_t>(s)] += delta[s];
      text += fmt::format(" {}{:+.6g}", config_.model.species[s], delta[s]);
    }
    log(fmt::format("statistics: energy shift{} re-fitted to the data's residuals (eV):{}",
                    head >= 0 ? " of head " + heads.at(head) : "", text));
  }
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
