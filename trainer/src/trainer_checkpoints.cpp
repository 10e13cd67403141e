// The trainer's side of the checkpoint protocol (trainer/src/checkpoint.h has the file
// operations): what a checkpoint holds, how best/ follows it, and what --resume checks and repairs.
#include <algorithm>
#include <limits>
#include <fstream>
#include <sstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/serialize.h>

#include "checkpoint.h"
#include "mlip/error.h"
#include "mlip/data/file_io.h"
#include "recorded_step.h"
#include "training.h"

namespace mlip::trainer {
namespace fs = std::filesystem;

// How the frames of each epoch and a validation_fraction split are ordered (trainer/src/permutation.h),
// kept in state.json: a checkpoint written under another order resumes, saying so.
constexpr const char* kFrameOrder = "seeded-permutation-1";

// The model section of the config as the checkpoint records it: what a resumed run must match.
static nlohmann::json model_settings(const Config& c) { return checkpoint_settings(c.model); }

void Trainer::save_checkpoint(bool best) {
  if (!comm_.is_root()) return;
  namespace ck = checkpoint;
  const fs::path root = checkpoint_dir();
  // epoch-NNNNNN after N epochs; epoch-NNNNNN-step-SSSSSSSSS inside the next one (sorts after it)
  const std::string name = state_.epoch_step > 0 ? fmt::format("epoch-{:06d}-step-{:09d}", state_.epoch, state_.step)
                                                  : fmt::format("epoch-{:06d}", state_.epoch);
  const fs::path tmp = root / (name + ".tmp");
  ck::fault_point("begin", state_.epoch);
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  // Everything is serialised in memory, then written by one checked, fsynced path.
  auto bytes_of = [](const auto& save) {
    std::ostringstream out(std::ios::binary);
    save(out);
    return out.str();
  };
  ck::write_file(tmp / "model.pt", bytes_of([&](std::ostream& o) { model_.module.save(o); }));
  ck::fault_point("model.pt", -1);
  ck::write_file(tmp / "optimizer.pt", bytes_of([&](std::ostream& o) {
                   torch::serialize::OutputArchive archive;
                   optimizer_->save(archive);
                   archive.save_to(o);
                 }));
  ck::fault_point("optimizer.pt", -1);
  if (!ema_.empty()) {
    ck::write_file(tmp / "ema.pt", bytes_of([&](std::ostream& o) { torch::save(ema_, o); }));
    ck::fault_point("ema.pt", -1);
  }
  const nlohmann::json st = {{"epoch", state_.epoch},
                             {"step", state_.step},
                             {"best_metric", state_.best_metric},
                             {"best_epoch", state_.best_epoch},
                             {"epochs_without_improvement", state_.epochs_without_improvement},
                             {"elapsed_seconds", state_.elapsed_seconds},
                             {"epoch_step", state_.epoch_step},
                             {"frame_order", kFrameOrder},
                             {"epoch_sums", state_.epoch_sums},
                             {"schedule", schedule_->state()},
                             {"metadata", model_.metadata.to_json()},
                             {"model_settings", model_settings(config_)},
                             {"config", config_text_}};
  nlohmann::json state = st;
  if (recorded_) {   // training.cuda_graph: the padded shapes the next step takes (restore_capacity)
    const BatchCapacity& c = recorded_->capacity();
    state["batch_capacity"] = {{"frames", c.frames}, {"centers", c.centers}, {"edges", c.edges}, {"virial", c.virial}};
  }
  ck::write_file(tmp / "state.json", state.dump(2));
  ck::fault_point("state.json", -1);
  ck::seal(tmp);
  ck::fault_point("sealed", -1);
  const fs::path final_dir = root / name;
  fs::remove_all(final_dir);
  fs::rename(tmp, final_dir);  // atomic: a checkpoint is complete or absent
  ck::sync(root);
  ck::fault_point("renamed", -1);
  if (best) update_best(final_dir);
  // Keep the last k epoch checkpoints (best/ is kept separately).
  std::vector<fs::path> epochs = ck::epoch_folders(root);
  for (std::size_t k = static_cast<std::size_t>(std::max<int64_t>(1, config_.keep_checkpoints)); k < epochs.size(); ++k) {
    fs::remove_all(epochs[k]);
  }
  ck::fault_point("pruned", -1);
}

namespace {
// Copies a checkpoint folder file by file with checked writes: a full disk is named as such
// (fs::copy reports it as an input/output error).
void copy_folder(const fs::path& from, const fs::path& to) {
  fs::create_directories(to);
  for (const auto& e : fs::recursive_directory_iterator(from)) {
    const fs::path target = to / fs::relative(e.path(), from);
    if (e.is_directory()) {
      fs::create_directories(target);
    } else {
      checkpoint::write_file(target, read_file(e.path()));
    }
  }
}
}  // namespace

void Trainer::update_best(const fs::path& epoch_dir) {
  namespace ck = checkpoint;
  const fs::path root = checkpoint_dir();
  const fs::path best_tmp = root / "best.tmp";
  fs::remove_all(best_tmp);
  copy_folder(epoch_dir, best_tmp);
  if (fs::exists(best_tmp / "digests.json")) {
    const std::string damaged = ck::verify(best_tmp);
    if (!damaged.empty()) throw Error(best_tmp.string() + ": the copy of " + epoch_dir.string() + " is damaged: " + damaged);
  } else {
    ck::seal(best_tmp);  // a checkpoint of an older mlip-trainer: sealed from now on
  }
  for (const auto& e : fs::directory_iterator(best_tmp)) ck::sync(e.path());
  ck::sync(best_tmp);
  ck::fault_point("best-copied", -1);
  ck::replace_folder(best_tmp, root / "best");
  ck::fault_point("best-replaced", -1);
}

void Trainer::load_checkpoint(const std::string& dir) {
  const auto st = nlohmann::json::parse(std::ifstream(fs::path(dir) / "state.json"));
  if (st.contains("model_settings")) {
    // A resumed run must train the same model: list every key that differs.
    const nlohmann::json diff = nlohmann::json::diff(st["model_settings"], model_settings(config_));
    std::vector<std::string> differing;  // "model.hyperparameters.embedding", each once
    for (const auto& d : diff) {
      std::string key = "model" + d["path"].get<std::string>();
      while (key.find_last_of('/') != std::string::npos &&
             key.find_first_not_of("0123456789", key.find_last_of('/') + 1) == std::string::npos) {
        key.erase(key.find_last_of('/'));  // list elements: the list's key
      }
      std::replace(key.begin(), key.end(), '/', '.');
      if (std::find(differing.begin(), differing.end(), key) == differing.end()) differing.push_back(key);
    }
    std::string keys;
    for (const auto& k : differing) keys += (keys.empty() ? "" : ", ") + k;
    if (!keys.empty()) {
      throw Error(config_.file + ": differs from the model of checkpoint " + dir + " in " + keys +
                  "; resume with the checkpoint's model settings, or start a new output.dir");
    }
  } else {
    log(dir + ": written by an older mlip-trainer, without the model settings to compare with this config");
  }
  torch::jit::Module loaded = torch::jit::load((fs::path(dir) / "model.pt").string(), device_);
  {
    torch::NoGradGuard no_grad;  // restoring weights
    for (const auto& p : loaded.named_parameters()) model_.module.attr(p.name).toTensor().copy_(p.value);
    for (const auto& b : loaded.named_buffers()) model_.module.attr(b.name).toTensor().copy_(b.value);
  }
  torch::serialize::InputArchive archive;
  archive.load_from((fs::path(dir) / "optimizer.pt").string(), device_);
  optimizer_->load(archive);
  if (!ema_.empty()) {
    std::vector<torch::Tensor> saved;
    torch::load(saved, (fs::path(dir) / "ema.pt").string(), device_);
    torch::NoGradGuard no_grad;
    for (std::size_t i = 0; i < ema_.size(); ++i) ema_[i].copy_(saved.at(i));
  }
  state_.epoch = st["epoch"];
  state_.step = st["step"];
  state_.best_metric = st["best_metric"];
  state_.best_epoch = st["best_epoch"];
  state_.epochs_without_improvement = st["epochs_without_improvement"];
  state_.elapsed_seconds = st["elapsed_seconds"];
  state_.epoch_step = st.value("epoch_step", int64_t{0});
  if (st.value("frame_order", std::string()) != kFrameOrder) {
    log(dir + ": written by an mlip-trainer that ordered the frames otherwise (std::shuffle): from here on they "
              "follow this one's order (trainer/src/permutation.h), the rest of this epoch and a validation_fraction "
              "split included");
  }
  state_.epoch_sums = st.value("epoch_sums", std::vector<double>{});
  schedule_->restore(st.contains("schedule") ? st["schedule"] : nlohmann::json());
  if (recorded_ && st.contains("batch_capacity")) restore_capacity(st["batch_capacity"], dir);
}

// training.cuda_graph: the recorded step resumes at the capacities it had when the checkpoint was
// written, so that its batches are padded to the same shapes as in the run that was not stopped
// (the matrix products' sums run over the padded rows: other shapes, other rounding). A checkpoint
// of another grouping (other species or nets) is not used, saying so.
void Trainer::restore_capacity(const nlohmann::json& saved, const std::string& dir) {
  BatchCapacity c;
  c.frames = saved.at("frames").get<int64_t>();
  c.centers = saved.at("centers").get<std::vector<int64_t>>();
  c.edges = saved.at("edges").get<std::vector<int64_t>>();
  c.virial = saved.at("virial").get<bool>();
  const auto species = static_cast<std::size_t>(grouping_->n_species);
  if (c.centers.size() != species || c.edges.size() != (grouping_->pair_nets ? species * species : species)) {
    log(dir + ": its recorded step's capacities are of another grouping; the step grows its own from the batches");
    return;
  }
  recorded_->reserve(c);
}

std::string Trainer::newest_intact_checkpoint() {
  std::string chosen;
  for (const fs::path& dir : checkpoint::epoch_folders(checkpoint_dir())) {
    if (!fs::exists(dir / "digests.json") && fs::exists(dir / "state.json")) {
      log(dir.string() + ": written by an older mlip-trainer (no digests.json): used without verification");
      chosen = dir.string();
      break;
    }
    const std::string damaged = checkpoint::verify(dir);
    if (damaged.empty()) {
      chosen = dir.string();
      break;
    }
    log(fmt::format("checkpoint {} is not intact ({}); trying the one before it", dir.string(), damaged));
  }
  return chosen;
}

namespace {

// A checkpoint folder that can be used: its files match their digests, or it is of an older
// mlip-trainer (no digests.json) and has its state.json.
bool usable(const fs::path& dir) {
  if (!fs::exists(dir / "state.json")) return false;
  return !fs::exists(dir / "digests.json") || checkpoint::verify(dir).empty();
}

// The epoch a checkpoint folder holds; -1 if it is missing or damaged.
int64_t saved_epoch(const fs::path& dir) {
  if (!usable(dir)) return -1;
  try {
    return nlohmann::json::parse(std::ifstream(dir / "state.json")).at("epoch").get<int64_t>();
  } catch (const nlohmann::json::exception&) {
    return -1;
  }
}

}  // namespace

// After a resume: best/ must hold the best epoch's checkpoint. A kill between writing an epoch's
// checkpoint and copying it to best/ leaves the previous best there; a fall-back to an older
// checkpoint (the newer one damaged) leaves a best/ the resumed run never reached. And
// metrics.csv keeps only the epochs up to the one resumed from. Every rank decides the same
// (the files are shared); rank 0 writes.
void Trainer::repair_after_resume(const std::string& resumed_from) {
  (void)resumed_from;
  const fs::path root = checkpoint_dir();
  if (comm_.is_root()) checkpoint::restore_set_aside(root / "best");
  comm_.barrier();
  const int64_t best_saved = saved_epoch(root / "best");
  if (state_.best_epoch >= 0 && best_saved != state_.best_epoch) {
    const fs::path source = root / fmt::format("epoch-{:06d}", state_.best_epoch);
    if (usable(source)) {
      log(fmt::format("best/ holds epoch {}, the best is epoch {}: restoring it from {}", best_saved, state_.best_epoch,
                      source.string()));
      if (comm_.is_root()) update_best(source);
    } else {
      log(fmt::format("best/ holds epoch {}, the best epoch {} has no intact checkpoint left: the next epoch to "
                      "end becomes best/",
                      best_saved, state_.best_epoch));
      state_.best_metric = std::numeric_limits<double>::infinity();
      state_.best_epoch = -1;
    }
  }
  comm_.barrier();
  if (comm_.is_root()) trim_metrics();
}

void Trainer::trim_metrics() const {
  const fs::path csv = fs::path(config_.output_dir) / "metrics.csv";
  if (!fs::exists(csv)) return;
  std::ifstream in(csv);
  std::string kept, line;
  bool header = true, dropped = false;
  while (std::getline(in, line)) {
    if (!header && std::atoll(line.c_str()) > state_.epoch) {
      dropped = true;
      continue;
    }
    kept += line + "\n";
    header = false;
  }
  if (!dropped) return;
  checkpoint::write_file(csv.string() + ".tmp", kept);
  fs::rename(csv.string() + ".tmp", csv);
}

}  // namespace mlip::trainer
