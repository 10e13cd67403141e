// A model's whole MD step on its device with static shapes, so that one CUDA graph records it
// (pair_style mlip ... graph device cuda_graph yes): the positions and species go to the device once,
// the cell list, the edge list grouped by embedding net (mlip/model/grouped_graph.h's layout), the
// model's forward_grouped(), and the forces and virial summed onto the atoms all run there, and one
// block of results comes back. Nothing waits for the device in between: no size is read back
// before the end of the step.
//
// Static shapes: the atoms (local and ghost), the centres of each species (both counted on the
// host) and the edges of each embedding net have capacities, grown by grouped_capacity()'s rule
// (10% headroom, multiples of 32) and never shrunk. The device counts the edges of each net and
// lists those that fit; the counts come back with the results, and a step whose edges outgrew a
// net is evaluated again at the new capacity (so it costs a second evaluation, and a recording).
// The cell grid's number of cells is part of the recording too: it is chosen again when the box
// has changed so much that the cells are far wider than the cutoff; between, the grid's corner and
// cell widths are inputs of each step, the widths never below the cutoff.
//
// Layout of a local model's chunk for the model: the centres' nodes [0, C) grouped by species (the
// chunk's atoms of [0, n_local) the model takes, in atom order within a species; padding centres have no edges and their
// energies are dropped), then one node for every atom, C + a for atom a, which is each edge's
// neighbour (node), whether it is a local or a ghost atom. Padding edges are grouped_graph.h's.
//
// Message-passing models (PaiNN, MACE; grouped_graph.h's two groups of edges, into the centres and
// into the others): a chunk's halo, the atoms within layers hops of its centres, is found on the
// device hop by hop (the cell kernels of mlip/model/device_graph.h), and those within layers - 1
// send along all their edges; a centre's node is its slot, the halo's atoms follow in atom order
// (a capacity of its own, grown like the others), then one spare node. Every group of centres
// keeps a free slot (its capacity grows when a chunk's count reaches it), and a chunk's padding
// edges join its padding centres to themselves, at the cutoff, in turn; their gradients are
// dropped. The chunks' edges are listed chunk by chunk (their halos differ), each before its
// model call; a chunk's counts are its edges into its centres and into its halo, and the halo's
// atoms. The local models' layout below is theirs alone.
//
// Chunks: the centres may be split into K chunks of consecutive local atoms (evaluate's
// `chunk_atoms`: at most that many local atoms each), all of the same layout (the capacities per
// species and per net are the most any chunk needs); a local model's edges of all chunks are listed at once,
// then the model and its forces run chunk after chunk inside the same recording, so that the
// memory of a chunk's model call is reused by the next (the edge list, of all chunks, is 40 bytes
// an edge). The number of chunks never shrinks; when it grows, the capacities are chosen anew.
//
// Before each recording the edges are counted first (one read back), so that the recording fits
// them. With `record` false, the same step runs eagerly on any device (counted first only at the
// first step; later an overflow is found afterwards): the code path the CPU tests check. A step
// that asks for per-atom virials runs eagerly too (on LAMMPS's dump steps), so that the recording
// need not change: its memory comes on top of the recording's.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "mlip/model/grouped_graph.h"
#include "mlip/model/model.h"

namespace mlip {

namespace detail {
struct CudaGraphRecorder;
}

/// One step's results, float64 on the CPU, in eV and Å, in atom order.
struct StepOutput {
  torch::Tensor atom_energy;   // (n_local): 0 for atoms the model skips
  torch::Tensor forces;        // (n, 3): on local and ghost atoms (LAMMPS sums the ghosts' onto their owners)
  torch::Tensor virial;        // (9) row-major W_ab = -sum over edges r_a g_b
  torch::Tensor atom_virial;   // (n, 9) each edge's -r (x) g on its neighbour atom; undefined unless asked
  double shortest = std::numeric_limits<double>::infinity();   // the shortest edge (Å)
  int64_t n_edges = 0;         // of all chunks (message passing: a halo edge in every chunk it serves)
  std::vector<int64_t> counts;   // edges per embedding net (message passing: into the centres, into
                                 // the halo, then the halo's atoms): the most of any chunk
  double host_seconds = 0;       // the host's part in this call, repeats included: the staging (checks,
                                 // bounding box, grid, slots, pinned inputs) and the unpacking of the
                                 // results after their copy back; not its launches, waits and copies
};

/// A recording's memory on a GPU: the peak bytes LibTorch's allocator gave it beyond what was in
/// use before (the edge lists of all chunks, one chunk's model call, the results), and the
/// centres and edges of a chunk (capacities); zero where the memory cannot be known.
struct StepMemory {
  int64_t centres = 0, edges = 0, bytes = 0;
};

/// The capacities a step is evaluated (and recorded) at.
struct StepCapacity {
  int64_t atoms = 0;
  int64_t chunks = 1;
  std::vector<int64_t> centers, edges;   // of a chunk: per species; per embedding net
  std::vector<int64_t> cells;            // cells per axis (3)
  int64_t others = 0;                    // message passing: the halo's atoms of a chunk
  bool operator==(const StepCapacity& o) const {
    return atoms == o.atoms && chunks == o.chunks && centers == o.centers && edges == o.edges && cells == o.cells &&
           others == o.others;
  }
};

class DeviceStep {
 public:
  /// Throws mlip::Error naming the reason when the model has no forward_grouped(), when it is on a
  /// GPU and libmlip_cuda_ops.so cannot be loaded, or, with `record`, when
  /// the model is not on a GPU or libmlip_cuda_graph.so cannot be loaded (mlip/model/graph_capture.h).
  /// Edges shorter than `min_distance` (Å) are the caller's to report (StepOutput::shortest): the
  /// compressed tables' range is not checked below it.
  DeviceStep(const Model& model, double cutoff, bool record, double min_distance = 0.0);
  ~DeviceStep();
  DeviceStep(const DeviceStep&) = delete;
  DeviceStep& operator=(const DeviceStep&) = delete;

  /// The step of n atoms: `positions` (n, 3) row-major in host memory, times `scale` for Å;
  /// `species` (n) the model's species index of each atom, -1 for atoms the model skips; the
  /// atoms [0, n_local) are the centres, in chunks of at most `chunk_atoms` of them (0: one chunk;
  /// the chunks of an earlier step are kept if there were more). Throws mlip::Error for a species
  /// outside the model's, a position not finite, or, for a compressed model, an edge shorter than
  /// its tables reach. A step that throws (out of GPU memory too) adds nothing; the next evaluates
  /// again.
  StepOutput evaluate(const double* positions, double scale, const int64_t* species, int64_t n, int64_t n_local,
                      bool atom_virial, int64_t chunk_atoms = 0);

  /// `f` runs before each recording (none when eager), e.g. to stop a profiler: a capture is not
  /// profiled.
  void before_recording(std::function<void()> f);
  /// How many times the step was recorded (the first time and each growth); 0 when eager.
  int64_t recordings() const { return recordings_; }
  /// Steps evaluated a second time because their edges outgrew a capacity.
  int64_t repeats() const { return repeats_; }
  const StepCapacity& capacity() const { return capacity_; }
  /// The memory of the latest recording, or of an eager step's first at its capacity (one without
  /// per-atom virials): mlip/model/device_memory.h's figures; zero while there are none.
  const StepMemory& memory() const { return memory_; }
  /// How many times memory() was measured.
  int64_t measurements() const { return measurements_; }

  struct Buffers;   // device_step.cpp

 private:
  std::array<double, 6> stage(const double* positions, double scale, const int64_t* species, int64_t n,
                              int64_t n_local, int64_t chunk_atoms);
  void choose_grid(const double* lo, const double* hi);
  void stage_inputs(const double* positions, double scale, const int64_t* species, int64_t n, int64_t n_local,
                    const double* lo, const double* hi);
  void resize();
  StepOutput attempt(const double* positions, double scale, const int64_t* species, int64_t n, int64_t n_local,
                     bool atom_virial, int64_t chunk_atoms);
  void record();
  /// run(false), its memory measured (an eager step's first at a capacity).
  std::pair<torch::Tensor, torch::Tensor> measured_run();
  void measured(const std::function<void()>& call);
  /// The device's part; returns the packed results (device_step.cpp) and the per-atom virials.
  std::pair<torch::Tensor, torch::Tensor> run(bool atom_virial);
  struct Sums {
    torch::Tensor forces, energy, virial, node_virial;   // onto the atoms (node_virial: undefined unless asked)
  };
  void run_chunk(const torch::Tensor& edge_index, const torch::Tensor& vectors, const torch::Tensor& species,
                 const torch::Tensor& centre_atom, const torch::Tensor& other_atom, const Sums& sums);
  std::pair<torch::Tensor, torch::Tensor> run_local(const Sums& sums);
  std::pair<torch::Tensor, torch::Tensor> run_message_passing(const Sums& sums);
  torch::Tensor edge_totals();
  /// The results unpacked; the host's time after the copy back added to `host_seconds`.
  StepOutput results(const std::pair<torch::Tensor, torch::Tensor>& run, int64_t n, int64_t n_local,
                     double* host_seconds) const;
  bool fit(std::vector<int64_t> most);
  void check_tables(double shortest) const;

  const Model* model_;
  GroupingRule rule_;
  double cutoff_, min_distance_;
  int hops_;   // message-passing layers (1 for a local model)
  StepCapacity capacity_, wanted_;
  StepMemory memory_;
  std::unique_ptr<Buffers> b_;
  std::unique_ptr<detail::CudaGraphRecorder> recorder_;   // null: eager
  bool recorded_ = false;                                 // a recording for capacity_
  bool measured_ = false;                                 // an eager step's memory for capacity_
  int64_t recordings_ = 0, repeats_ = 0, measurements_ = 0;
};

}  // namespace mlip
