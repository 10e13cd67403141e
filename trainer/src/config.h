// mlip-trainer's configuration: a YAML file checked key by key. An unknown or misspelt key, a
// value of the wrong type or a missing required key is an error naming the file, line and key.
// See docs/config.md for the reference.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlip/data/dataset.h"
#include "mlip/model_spec.h"

namespace mlip::trainer {

struct DataSource {
  std::string path;
  std::string format = "auto";
  Units units;
  double weight = 1.0;       // multiplies every frame's weight
  std::optional<bool> stream;  // read frames by index as needed (packs always are); unset: the consumer's default
  /// A multi-head model's head the frames train (model.hyperparameters.heads; unset: the default
  /// head, `head`), as its index; -1 for a model without heads.
  int head = -1;
};

struct ScheduleConfig {
  std::string type = "exponential";  // exponential | cosine | constant | plateau
  double final_lr = 1e-5;            // exponential and cosine end here; plateau's floor
  int64_t warmup_steps = 0;          // linear warm-up (all types)
  double factor = 0.5;               // plateau: lr multiplier when validation stalls
  int64_t patience = 5;              // plateau: epochs without improvement before reducing
  double threshold = 1e-3;           // plateau: relative improvement that counts
};

struct PrefactorConfig {
  double start = 1.0;  // DeePMD-style: p = limit + (start - limit) * lr / lr0
  double limit = 1.0;
};

struct Config {
  std::string file;  // where it was read from

  ModelSpec model;                      // the model section (mlip/model_spec.h)

  // data
  std::vector<DataSource> train;
  std::vector<DataSource> validation;   // empty: split off validation_fraction of train
  double validation_fraction = 0.1;
  uint64_t split_seed = 1;
  std::string cache_dir = ".mlip-cache";
  int64_t batch_frames = 1;             // global batch in frames...
  int64_t batch_atoms = 0;              // ...or, if > 0, an atom budget per global batch
  int64_t accumulate = 1;               // micro-batches per optimiser step
  int64_t prefetch = 4;                 // batches built ahead in a background thread (0: none)

  // training
  int64_t epochs = 100;
  double max_minutes = 0.0;             // stop after this wall time (0: no limit)
  uint64_t seed = 1;                    // sampling order
  std::string optimizer = "adam";       // adam | adamw
  double lr = 1e-3;
  double weight_decay = 0.0;
  bool amsgrad = false;                 // Adam's AMSGrad variant (mace-torch's default)
  std::string fused = "auto";           // ATen's fused Adam kernels: auto (= on GPUs) | true | false
  ScheduleConfig schedule;
  std::string loss = "mse";             // mse | huber
  double huber_delta = 0.01;
  PrefactorConfig energy{0.02, 1.0}, forces{1000.0, 1.0}, virial{0.0, 0.0};
  double grad_clip = 0.0;               // max global gradient norm (0: off)
  double ema_decay = 0.0;               // EMA of weights for validation/export (0: off)
  int64_t early_stopping_patience = 0;  // epochs without improvement (0: off)
  std::string init_from;                // fine-tuning: a model file or checkpoint folder to start from
  std::string freeze = "none";          // none | descriptor (with init_from: train the rest only)
  bool refit_energy_shift = true;       // re-fit the energy shift to the residuals: with init_from at the
                                        // start, and at each validation on refit_frames training frames
  int64_t refit_frames = 64;            // (0: no re-fit at validations; a multi-head model: per head)

  // where training runs (docs/config.md "Devices and communication")
  std::string device = "auto";          // auto | cpu | cuda | cuda:N (mlip/model/device.h)
  std::string data_on_device = "auto";  // auto (= true on a GPU) | true | false
  bool grouped = false;                 // training batches grouped for the model's forward_grouped()
  std::string cuda_graph = "false";     // the training step recorded as a CUDA graph: false | true | eager
  bool tf32 = false;                    // TF32 matrix products for float32 models on GPUs
  bool deterministic = true;            // deterministic GPU kernels (bitwise resume)
  std::string accumulate_dtype = "float64";  // energies, forces and loss: float64 | float32

  // communication
  std::string comm_backend = "auto";    // auto (nccl on GPUs where built, else mpi) | mpi | nccl
  double bucket_mb = 25.0;              // gradient all-reduce bucket size
  double comm_timeout = 600.0;          // s an NCCL all-reduce may stay unfinished (0: no limit)

  // output
  std::string output_dir = "run";
  int64_t keep_checkpoints = 3;
  int64_t checkpoint_every_steps = 0;   // also a checkpoint every N steps inside epochs (0: epoch ends only)
  int64_t log_every = 10;               // steps between progress lines
};

/// Reads and checks `path`; `overrides` are "dotted.key=value" strings applied before checking
/// (value parsed as YAML, e.g. training.lr=1e-4, data.train=[a.xyz]).
Config read_config(const std::string& path, const std::vector<std::string>& overrides = {});

/// The config as YAML text, stored in checkpoints and model provenance.
std::string config_text(const std::string& path, const std::vector<std::string>& overrides);

}  // namespace mlip::trainer
