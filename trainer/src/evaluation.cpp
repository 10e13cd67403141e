// Model files from checkpoints (export) and models on labelled data (test).
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/serialize.h>

#include "checkpoint.h"
#include "mlip/error.h"
#include "mlip/data/io.h"
#include "mlip/model/model_metadata.h"
#include "training.h"

namespace mlip::trainer {
namespace fs = std::filesystem;

// A checkpoint's module with its EMA weights when it has them, and its metadata, on the CPU
// whatever device trained it: model files are portable.
Trainable read_checkpoint(const fs::path& dir) {
  if (!fs::exists(dir / "model.pt") || !fs::exists(dir / "state.json")) {
    throw Error(dir.string() + ": not a checkpoint folder (needs model.pt and state.json)");
  }
  if (fs::exists(dir / "digests.json")) {
    const std::string damaged = checkpoint::verify(dir);
    if (!damaged.empty()) throw Error(dir.string() + ": damaged checkpoint: " + damaged);
  }
  torch::jit::Module module = torch::jit::load((dir / "model.pt").string(), torch::kCPU);
  if (fs::exists(dir / "ema.pt")) {
    std::vector<torch::Tensor> ema;
    torch::load(ema, (dir / "ema.pt").string(), torch::kCPU);
    torch::NoGradGuard no_grad;  // installing the EMA weights (of the trainable parameters)
    std::size_t i = 0;
    for (torch::Tensor& p : trainable_parameters(module)) p.copy_(ema.at(i++));
  }
  const auto state = nlohmann::json::parse(std::ifstream(dir / "state.json"));
  ModelMetadata meta = ModelMetadata::from_json(state.at("metadata"), (dir / "state.json").string());
  meta.provenance["checkpoint_epoch"] = state.at("epoch");
  meta.provenance["ema_weights"] = fs::exists(dir / "ema.pt");
  meta.provenance["config"] = state.at("config");
  return {module, meta};
}

namespace {

void log_compression(const CompressReport& r, const std::function<void(const std::string&)>& log) {
  if (!log) return;
  log(fmt::format("compressed: {} embedding nets x {} bins x {} features ({:.1f} MiB), neighbours down to {:.3f} A, "
                  "largest table error {:.2e} (relative to the largest embedding value)",
                  r.nets, r.bins, r.width, r.megabytes, r.min_distance, r.max_error));
}

// Freezes `t`: in float32 and compressed first if asked.
void write_model(Trainable t, const std::string& output, const ExportOptions& options,
                 const std::function<void(const std::string&)>& log) {
  if (!options.dtype.empty() && options.dtype != t.metadata.dtype) {
    if (options.dtype != "float32") throw Error("--dtype: only float32 (not '" + options.dtype + "')");
    t.module.to(torch::kFloat32);
    t.metadata.dtype = "float32";
    t.metadata.provenance["converted_from"] = "float64";
  }
  if (options.compress) {
    CompressReport report;
    t.module = compress_model(t.module, t.metadata, options.compression, &report);
    log_compression(report, log);
  }
  export_frozen(t.module, t.metadata, output);
}

}  // namespace

void export_checkpoint(const std::string& checkpoint_dir, const std::string& output, nlohmann::json provenance,
                       const ExportOptions& options, const std::function<void(const std::string&)>& log) {
  Trainable t = read_checkpoint(checkpoint_dir);
  provenance["trainer"] = "mlip-trainer";
  for (const auto& [key, value] : t.metadata.provenance.items()) provenance[key] = value;
  t.metadata.provenance = provenance;
  write_model(std::move(t), output, options, log);
}

void compress_file(const std::string& source, const std::string& output, ExportOptions options,
                   const std::function<void(const std::string&)>& log) {
  options.compress = true;
  if (fs::is_directory(source)) {
    export_checkpoint(source, output, {{"exported_from", fs::absolute(source).string()}}, options, log);
    return;
  }
  Model model = Model::load(source);
  if (!options.dtype.empty() && options.dtype != model.info().dtype) {
    throw Error(source + ": a frozen model keeps its dtype (" + model.info().dtype +
                "); convert from its checkpoint (mlip-trainer compress CHECKPOINT --dtype float32)");
  }
  Trainable t{model.module(), model.metadata()};
  t.metadata.provenance["compressed_from"] = fs::absolute(source).string();
  write_model(std::move(t), output, options, log);
}

// A one-frame batch evaluated exactly as pair_style mlip evaluates its graphs: evaluate_graph()
// on float64 arrays (the model's dtype and device are its business), edge_forces() after it.
Prediction evaluate_as_lammps(const Model& model, const BatchTensors& t) {
  GraphView graph;
  graph.species = t.species.data_ptr<int64_t>();
  graph.n_nodes = t.n_atoms;
  graph.edge_index = t.edge_index.data_ptr<int64_t>();
  graph.edge_index_stride = t.edge_index.size(1);
  graph.edge_vectors = t.edge_vectors.data_ptr<double>();
  graph.n_edges = t.edge_index.size(1);
  graph.n_centers = t.n_atoms;
  const ModelOutput out = evaluate_graph(model, graph);
  EdgeForceRequest request;
  request.virial = true;
  const EdgeForces f = edge_forces(t.edge_index, t.edge_vectors, out.edge_grad, t.n_atoms, request);
  return Prediction{out.atom_energy.sum().reshape({1}), f.forces, f.virial};
}

MetricSums test_model(const std::string& model_path, const std::string& data_path, const std::string& format,
                      const Units& units, const TestOptions& options,
                      const std::function<void(const std::string&)>& log) {
  Model model = Model::load(model_path);
  if (!options.head.empty()) {
    try {
      model.select_head(options.head);
    } catch (const Error& e) {
      throw Error(model_path + ": " + e.what());
    }
  }
  const auto& meta = model.metadata();
  DataSource src;
  src.path = data_path;
  src.format = format;
  src.units = units;
  // Packs, extended XYZ and ASE databases are read frame by frame as they are evaluated; other
  // formats are parsed whole.
  const std::shared_ptr<FrameSource> frames = open_source(src, meta.cutoff, "", meta.species, log, true);
  const SpeciesMap species(meta.species);
  // Written to PATH.tmp and renamed at the end: a failed run never empties earlier results.
  auto open_csv = [](const std::string& path, const char* header) {
    std::ofstream out;
    if (path.empty()) return out;
    out.open(path + ".tmp");
    if (!out) throw Error(path + ".tmp: cannot open for writing");
    out << header;
    return out;
  };
  auto finish_csv = [](std::ofstream& out, const std::string& path) {
    if (path.empty()) return;
    out.close();
    if (!out) throw Error(path + ".tmp: write failed");
    fs::rename(path + ".tmp", path);
  };
  std::ofstream csv = open_csv(options.per_frame_csv, "frame,origin,atoms,energy_ref,energy_pred,force_rmse\n");
  std::ofstream fcsv = open_csv(options.forces_csv, "frame,atom,element,fx_ref,fy_ref,fz_ref,fx_pred,fy_pred,fz_pred\n");
  std::vector<double> sq_by_species(meta.species.size(), 0.0), n_by_species(meta.species.size(), 0.0);
  MetricSums sums;
  std::size_t unlabelled = 0;
  constexpr std::size_t kBlock = 256;
  std::vector<Frame> storage;
  // One frame's figures and CSV lines; frames are read in blocks (streamed ones as they come).
  auto evaluate = [&](const Frame& frame, std::size_t k) {
    const Structure& st = frame.structure;
    unlabelled += (st.energy || st.has_forces()) ? 0 : 1;
    const BatchTensors t = to_tensors(make_batch({&frame}, species), torch::kFloat64);
    const Prediction p = evaluate_as_lammps(model, t);
    MetricSums one;
    loss_terms(p, t, {1, 1, 1}, "mse", 0.0, 1.0, &one);
    sums.add(one);
    if (csv) {
      csv << fmt::format("{},{},{},{:.10g},{:.10g},{:.6g}\n", k, st.origin, st.size(),
                         st.energy ? *st.energy : MetricSums::kNoLabel, p.energy[0].item<double>(), one.forces_rmse());
    }
    if (!st.has_forces()) return;
    const torch::Tensor pf = p.forces.detach().to(torch::kFloat64).contiguous();
    const double* f = pf.data_ptr<double>();
    for (std::size_t i = 0; i < st.size(); ++i) {
      const auto s = static_cast<std::size_t>(species.index(st.numbers[i], st.origin));
      for (int d = 0; d < 3; ++d) {
        const double err = f[3 * i + d] - st.forces[i][d];
        sq_by_species[s] += err * err;
        n_by_species[s] += 1.0;
      }
      if (fcsv) {
        fcsv << fmt::format("{},{},{},{:.8g},{:.8g},{:.8g},{:.8g},{:.8g},{:.8g}\n", k, i, meta.species[s],
                            st.forces[i][0], st.forces[i][1], st.forces[i][2], f[3 * i], f[3 * i + 1], f[3 * i + 2]);
      }
    }
  };
  for (std::size_t first = 0; first < frames->size(); first += kBlock) {
    std::vector<int64_t> idx(std::min(kBlock, frames->size() - first));
    std::iota(idx.begin(), idx.end(), static_cast<int64_t>(first));
    const std::vector<const Frame*> block = frames->frames(idx, storage);
    for (std::size_t b = 0; b < block.size(); ++b) evaluate(*block[b], first + b);
  }
  if (unlabelled == frames->size()) {
    throw Error(data_path + ": none of its " + std::to_string(frames->size()) +
                " frames has an energy or forces: nothing to test the model against");
  }
  if (unlabelled > 0) {
    log(fmt::format("WARNING: {}: {} of {} frames have neither energy nor forces; they are left out of the RMSEs",
                    data_path, unlabelled, frames->size()));
  }
  finish_csv(csv, options.per_frame_csv);
  finish_csv(fcsv, options.forces_csv);
  for (std::size_t s = 0; s < meta.species.size(); ++s) {
    if (n_by_species[s] > 0) {
      log(fmt::format("force RMSE {:<3} {:.2f} meV/A ({:.0f} atoms)", meta.species[s],
                      1e3 * std::sqrt(sq_by_species[s] / n_by_species[s]), n_by_species[s] / 3));
    }
  }
  return sums;
}

}  // namespace mlip::trainer
