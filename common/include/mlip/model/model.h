// The model contract shared by the trainer and the LAMMPS pair style.
//
// A model is a TorchScript module (one definition per architecture, see potentials/) with
//
//   forward(species:      Tensor (n_nodes,) int64     model species index of each node,
//           edge_index:   Tensor (2, n_edges) int64   row 0 centre i, row 1 neighbour j,
//           edge_vectors: Tensor (n_edges, 3)          r_ij = x_j - x_i (+ cell shift), Å,
//           n_centers:    int)                         nodes [0, n_centers) get an energy
//     -> Tensor (n_centers,)                           per-atom energy, eV
//
// Nodes past n_centers are LAMMPS ghosts (or, in chunked evaluation, neighbours outside the
// chunk): they feed messages and descriptors but get no energy. Forces and virials are not the
// model's business: they come from autograd with respect to the edge vectors, here, so every
// architecture gets them the same way and ghost atoms need no special case.
//
// The file carries its metadata (species, cutoff, message-passing depth, dtype, units, ...) as
// the extra file `mlip/metadata.json`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <torch/script.h>

namespace mlip {

/// What a model file says about itself that its users need to run it. Plain types only: this
/// header is included by the LAMMPS pair style, whose host may bundle its own copies of JSON or
/// fmt headers, so the metadata's JSON parts live in mlip/model/model_metadata.h.
struct ModelInfo {
  std::string architecture;              // e.g. "se_e2_a", "pair_table" in tests
  std::vector<std::string> species;      // element symbols; model species index = position
  double cutoff = 0.0;                   // Å
  int message_passing_layers = 0;        // 0 for local models; ghosts must reach layers*cutoff
  std::string dtype = "float64";         // "float32" or "float64"
  std::string length_unit = "angstrom";
  std::string energy_unit = "eV";
  /// Whether the file carried a digest of its records (mlip/digest.json, written by save_model)
  /// and Model::load checked it; files from older mlip versions have none.
  bool digest_checked = false;
  /// A compressed model (mlip-trainer compress): tabulated embeddings, cheaper per edge.
  bool compressed = false;
  /// The module has forward_grouped(), the same energies for a graph whose edges come grouped by
  /// embedding net and whose centres come grouped by species (mlip/model/grouped_graph.h): static
  /// shapes, which a CUDA graph can record (se_e2_a and its compressed form).
  bool grouped_forward = false;

  /// Ghost-shell width LAMMPS must communicate: cutoff for local models, layers x cutoff else.
  double interaction_range() const {
    return cutoff * (message_passing_layers > 1 ? message_passing_layers : 1);
  }
  torch::Dtype torch_dtype() const { return dtype == "float32" ? torch::kFloat32 : torch::kFloat64; }
  int species_index(const std::string& element) const;   // -1 if the model lacks it
};

/// ModelInfo plus the architecture's hyperparameters and the model's provenance (JSON), the
/// whole of `mlip/metadata.json`: defined in mlip/model/model_metadata.h.
struct ModelMetadata;

/// Graph inputs of one model call, already on the model's device and dtype.
struct ModelInput {
  torch::Tensor species;        // (n_nodes,) int64
  torch::Tensor edge_index;     // (2, n_edges) int64
  torch::Tensor edge_vectors;   // (n_edges, 3) float
  int64_t n_centers = 0;
  /// Set for a grouped graph (mlip/model/grouped_graph.h): the sizes of its consecutive groups of
  /// centres (per species) and of edges (per embedding net); forward_grouped() is called then.
  std::vector<int64_t> center_groups, edge_groups;
  /// Set for a multi-head model's nodes of several heads (the trainer's batches): (n_nodes,) int64,
  /// each node's head; forward_heads() is called then. Undefined: forward(), the model's head.
  torch::Tensor node_head;
  /// Grouped calls only: forward_grouped_learned() instead, the model without its parameter-free
  /// prior (the repulsion), which the model must have (the trainer's steps on data where the prior
  /// is zero: Trainer's prior check).
  bool without_prior = false;
};

/// Outputs of one evaluation.
struct ModelOutput {
  torch::Tensor atom_energy;    // (n_centers,) eV
  torch::Tensor edge_grad;      // (n_edges, 3) dE/dr_ij, eV/Å; undefined if not requested
};

/// How much of dE/dr_ij a model call computes.
enum class EdgeGradient {
  none,             // energies only
  value,            // energies and edge gradients, both detached (MD, tests, validation)
  differentiable,   // the gradient keeps its graph, energies stay attached (a training step)
};

/// One call of a model's forward() and, if asked, dE/dr for every edge: the model call of every
/// consumer (Model::evaluate, hence pair_style mlip, mlip/kk and `mlip-trainer test`; and the
/// trainer's steps, on the module it trains). Never call under NoGradGuard.
ModelOutput evaluate_module(torch::jit::Module& module, const ModelInput& in, EdgeGradient gradient);

/// A loaded, frozen model: metadata plus the TorchScript module.
class Model {
 public:
  /// Loads and validates `path`. Throws mlip::Error naming the file on a missing, truncated or
  /// corrupted file, bytes altered since it was saved (its digest, see save_model), missing
  /// metadata, or a module without the contract's forward().
  static Model load(const std::string& path, const torch::Device& device = torch::kCPU);

  Model(torch::jit::Module module, ModelMetadata metadata, torch::Device device);

  /// Per-atom energies and, if `need_grad`, dE/dr for every edge. Never call under NoGradGuard.
  /// The selected head's (select_head) where the input names none.
  ModelOutput evaluate(const ModelInput& in, bool need_grad) const;

  /// A multi-head model's head every later evaluation uses (pair_style mlip ... head NAME,
  /// mlip-trainer test --head) instead of the file's own (hyperparameter `head`). Throws
  /// mlip::Error for a model without heads or a name not among them (listing them).
  void select_head(const std::string& name);
  /// The selected head's index, -1 for none (the file's own head: forward()).
  int64_t head() const { return head_; }

  const ModelInfo& info() const;
  const ModelMetadata& metadata() const { return *metadata_; }   // needs mlip/model/model_metadata.h
  const torch::Device& device() const { return device_; }
  torch::jit::Module& module() const { return module_; }

 private:
  mutable torch::jit::Module module_;
  std::shared_ptr<const ModelMetadata> metadata_;   // immutable, shared by copies
  torch::Device device_;
  int64_t head_ = -1;
};

class ChunkGraph;

/// A graph held in memory the caller owns (ChunkGraph buffers, LAMMPS Kokkos views) and keeps
/// alive during the call. Row-major arrays; edge_index row 1 starts edge_index_stride elements
/// after row 0 (a view with spare capacity has stride > n_edges).
struct GraphView {
  const int64_t* species = nullptr;        // (n_nodes)
  int64_t n_nodes = 0;
  const int64_t* edge_index = nullptr;     // (2, stride)
  int64_t edge_index_stride = 0;
  const double* edge_vectors = nullptr;    // (n_edges, 3), Å
  int64_t n_edges = 0;
  int64_t n_centers = 0;
  torch::Device device = torch::kCPU;      // where that memory lives
};

/// Evaluates a graph. The inputs are wrapped as tensors without a copy (from_blob; the memory
/// stays the caller's) and converted only where the model needs another dtype or device: this
/// is the one place such conversions happen. Returns energies and edge gradients as contiguous
/// float64 tensors on the graph's device, whatever the model's dtype and device.
ModelOutput evaluate_graph(const Model& model, const GraphView& graph, bool need_grad = true);

/// The buffers of one chunk as a GraphView (valid while the chunk's graph is unchanged).
GraphView graph_view(const ChunkGraph& graph);

/// evaluate_graph() on the buffers of one chunk (CPU).
ModelOutput evaluate_chunk(const Model& model, ChunkGraph& graph, bool need_grad = true);

/// Saves `module` with `metadata` as the extra file and a digest of all the file's records (the
/// extra file mlip/digest.json: CRC-32 over every record's name and bytes but its own and
/// PyTorch's per-save id), which Model::load checks: LibTorch does not check the zip's own CRCs,
/// and a model with altered weight bytes would otherwise load and run. Writes to a temporary
/// file, reads it back and checks it, then renames it, so an existing model file is never left
/// half-written. `more`: further extra files (the digest covers them too).
void save_model(torch::jit::Module& module, const ModelMetadata& metadata, const std::string& path,
                const torch::jit::ExtraFilesMap& more = {});

/// What edge_forces() computes besides forces.
struct EdgeForceRequest {
  bool virial = false;        // per-group virials
  bool node_virial = false;   // per-node virials
  torch::Tensor edge_group;   // (n_edges,) int64 group (frame) of each edge; undefined: one group
  int64_t n_groups = 1;
};

/// Forces and virials from edge gradients, as every consumer gets them.
struct EdgeForces {
  torch::Tensor forces;        // (n_nodes, 3)
  torch::Tensor virial;        // (n_groups, 9) row-major W_ab; undefined unless requested
  torch::Tensor node_virial;   // (n_nodes, 9) row-major; undefined unless requested
};

/// Forces and virials from edge gradients g_ij = dE/dr_ij, r_ij = x_j - x_i:
///   F_i += g_ij, F_j -= g_ij,   W_ab = -sum_ij r_a g_b   (per group of edges, e.g. per frame),
/// and as a per-node virial each edge's -r (x) g goes to its neighbour node j (the full 9
/// components: LAMMPS's centroid virial, which makes many-body heat fluxes right). Forces on
/// nodes past the local atoms are the ghost forces LAMMPS reverse-communicates.
/// The one place this is computed: training (differentiably, when the inputs carry a graph),
/// `mlip-trainer test`, pair_style mlip and mlip/kk. Tensor operations only, so it runs on the
/// inputs' device; results are in the edge gradients' dtype.
EdgeForces edge_forces(const torch::Tensor& edge_index, const torch::Tensor& edge_vectors,
                       const torch::Tensor& edge_grad, int64_t n_nodes, const EdgeForceRequest& request = {});

/// edge_forces() of a graph in caller-owned memory with the edge gradients evaluate_graph()
/// returned for it: the arrays are wrapped without a copy; results in float64 on its device.
EdgeForces edge_forces(const GraphView& graph, const torch::Tensor& edge_grad, const EdgeForceRequest& request);

}  // namespace mlip
