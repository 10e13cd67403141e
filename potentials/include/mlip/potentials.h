// The model architectures. Each is defined exactly once, here: a builder registers its parameters
// from C++ and writes its forward() in TorchScript (Module::define), following the model contract
// of common/include/mlip/model/model.h. The same module is trained by mlip-trainer (C++ autograd),
// exported frozen with its metadata, evaluated by pair_style mlip and loadable by torch.jit.load.
//
// Every architecture has two per-species buffers set from data by the trainer:
//   energy_shift (n_species,) eV and energy_scale (n_species,):  E_i = scale[s_i] * raw_i + shift[s_i]
// (a multi-head MACE model: (n_species, n_heads), E_i = scale[s_i, h_i] * raw_i + shift[s_i, h_i]).
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/script.h>

#include "mlip/data/dataset.h"
#include "mlip/model/heads.h"   // model_heads, default_head
#include "mlip/model/model_metadata.h"
#include "mlip/model_spec.h"

namespace mlip {

/// The spec's dtype as LibTorch's ("float32" or "float64"; another is an error).
torch::Dtype torch_dtype(const ModelSpec& spec);

/// How a parameter or buffer is indexed by species (for fine-tuning with other species):
///   none:               not at all
///   species:            leading axis, one entry per species
///   species_pair:       leading axis, ns x ns entries, (centre, neighbour) -> centre * ns + neighbour
///   species_by_species: the first two axes, one per species each
///   from_data:          statistics the trainer fits from the data at hand, or constants of the
///                       hyperparameters (index tables, basis frequencies); not transferred
enum class SpeciesAxes { none, species, species_pair, species_by_species, from_data };

/// A parameter with one block per species inside a flat tensor (MACE's e3nn-style weights):
/// viewed as `shape`, the species count at `axis`. `per_sqrt_species`: the forward divides it by
/// the square root of the species count (the normalisation of a one-hot input), so fine-tuning
/// into another species count rescales it to keep the function of the species both models have.
struct SpeciesLayout {
  std::vector<int64_t> shape;
  int64_t axis = 0;
  bool per_sqrt_species = false;
};

/// A trainable model (parameters require grad) and its metadata.
struct BuiltModel {
  torch::jit::Module module;
  ModelMetadata metadata;
  std::map<std::string, SpeciesAxes> species_axes;   // tensors indexed by species (absent: none)
  std::map<std::string, SpeciesLayout> species_layout;   // flat tensors with a species axis inside
  std::map<std::string, int64_t> head_axis;          // a multi-head model's tensors with one entry per head: which axis
  std::set<std::string> descriptor;                  // parameters of the descriptor (training.freeze)
};

/// Builds `spec`. Throws mlip::Error on an unknown architecture or bad hyperparameters.
BuiltModel build_model(const ModelSpec& spec);

/// The architectures build_model knows.
std::vector<std::string> architectures();

/// Fine-tuning: the weights of a model of the same architecture and hyperparameters (`source`:
/// its parameters and buffers by name; `source_metadata` its species and heads) copied into
/// `target`. Heads: a target head takes the source's head of its name, else the source's default
/// head (a single-head source's readout for every head: mace-torch's multi-head fine-tuning); a
/// multi-head source into a model without heads is an error (list the heads to keep).
/// Every tensor, and of those indexed by species the entries of species both models have (by
/// element). Entries of the target's other species keep their fresh initialisation; tensors
/// fitted from data (SpeciesAxes::from_data) keep the target's. Returns those other species.
/// Throws mlip::Error naming a tensor the source lacks or whose shape differs.
std::vector<std::string> transfer_weights(BuiltModel& target, const std::map<std::string, torch::Tensor>& source,
                                          const ModelMetadata& source_metadata);

/// The parameters and buffers of a module by name (what transfer_weights reads, and what
/// export_frozen stores beside the frozen model for fine-tuning: kWeightsFile).
std::map<std::string, torch::Tensor> named_weights(const torch::jit::Module& module);
constexpr const char* kWeightsFile = "mlip/weights.pkl";
/// The weights stored in an exported model file (read after Model::load has checked the file);
/// empty when it has none (compressed models, files from before fine-tuning existed).
std::map<std::string, torch::Tensor> read_model_weights(const std::string& path);

/// The trainable parameters of a module built here (those that require grad: training.freeze
/// turns it off for the descriptor's), in a stable order.
std::vector<torch::Tensor> trainable_parameters(const torch::jit::Module& module);

/// Freezes a copy of `module` for inference (parameters become constants; forward() is kept, and
/// the methods a compressed model needs where the architecture has them) and saves it with
/// `metadata` (atomic write). The trainable module is left untouched.
void export_frozen(const torch::jit::Module& module, const ModelMetadata& metadata, const std::string& path);

/// Sets the architecture's descriptor statistics from training frames (se_e2_a: the RMS of the
/// radial and angular environment per centre species; PaiNN: none). Energy shift and scale are
/// the trainer's business (energy_shift, energy_scale buffers).
void fit_descriptor_statistics(BuiltModel& model, const std::vector<const Frame*>& frames);

/// Sets the repulsion prior's inner radius of each species pair to the shortest distance between
/// such atoms in `frames` (pairs never seen: no prior) and records them in the metadata. Does
/// nothing for a model built without repulsion.
void fit_repulsion(BuiltModel& model, const std::vector<const Frame*>& frames);
/// The same from the shortest distance of each pair of species (index a * n_species + b; +inf
/// where the data has no such pair within the cutoff).
void fit_repulsion(BuiltModel& model, const std::vector<double>& shortest);

/// How compress_model tabulates an se_e2_a model's embedding nets.
struct CompressOptions {
  /// Shortest neighbour distance the table covers (Å); 0: 0.75 x the shortest distance in the
  /// training data (the model's provenance, `shortest_training_distance`).
  double min_distance = 0.0;
  /// Largest error of a tabulated embedding value allowed, relative to the largest |G|.
  double tolerance = 1e-11;
  int64_t max_bins = int64_t{1} << 16;
};

/// What compress_model made.
struct CompressReport {
  double min_distance = 0, step = 0, max_error = 0;   // Å, table input, relative
  int64_t bins = 0, nets = 0, width = 0;
  double megabytes = 0;
};

/// The compressed se_e2_a model of `base` (a trainable module or a frozen one exported by
/// export_frozen): each embedding net replaced by quintic Hermite polynomials (value, first and
/// second derivative exact at every grid point) on a uniform grid of its input, fused with the
/// contraction in torch.ops.mlip.tabulated_contraction (mlip/ops/tabulated_embedding.h). The grid
/// spans the inputs of neighbours from the cutoff down to options.min_distance and is refined
/// until options.tolerance holds. `metadata` gets a "compression" entry in its hyperparameters.
/// Throws mlip::Error on another architecture, an already compressed model, or a frozen model
/// exported before compression existed (it lacks the methods).
torch::jit::Module compress_model(const torch::jit::Module& base, ModelMetadata& metadata,
                                  const CompressOptions& options = {}, CompressReport* report = nullptr);

// Per-architecture pieces, called through build_model and fit_descriptor_statistics.
void fit_se_e2_a_statistics(BuiltModel& model, const std::vector<const Frame*>& frames);
void fit_painn_statistics(BuiltModel& model, const std::vector<const Frame*>& frames);
BuiltModel build_se_e2_a(const ModelSpec& spec);
BuiltModel build_painn(const ModelSpec& spec);
BuiltModel build_mace(const ModelSpec& spec);
void fit_mace_statistics(BuiltModel& model, const std::vector<const Frame*>& frames);

}  // namespace mlip
