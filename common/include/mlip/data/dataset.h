// Data sets as graphs: frames read by the readers of io.h, their neighbour lists, a binary cache
// so that a large data set is parsed and neighboured once, and batches of frames as one graph.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mlip/data/io.h"
#include "mlip/graph/neighbor_list.h"
#include "mlip/data/structure.h"

namespace mlip {

/// A labelled structure with its neighbour list (topology only: edge vectors are recomputed from
/// positions and shifts when batched).
struct Frame {
  Structure structure;
  std::vector<int32_t> centers;                // (n_edges)
  std::vector<int32_t> neighbors;              // (n_edges)
  std::vector<std::array<int32_t, 3>> shifts;  // (n_edges)
  /// The output head of a multi-head model this frame trains (its data source's); -1: the model's
  /// default (forward()).
  int32_t head = -1;

  std::size_t num_edges() const { return centers.size(); }

  /// r_ij of edge e: x_j - x_i plus its cell shift, Å.
  Vec3 edge_vector(std::size_t e) const {
    const Mat3& L = structure.cell.lattice;
    const Vec3 &xi = structure.positions[centers[e]], &xj = structure.positions[neighbors[e]];
    const auto& S = shifts[e];
    Vec3 r{};
    for (int d = 0; d < 3; ++d) r[d] = xj[d] - xi[d] + S[0] * L[0][d] + S[1] * L[1][d] + S[2] * L[2][d];
    return r;
  }
};

struct DatasetOptions {
  std::string format = "auto";  // as read_structures
  ReadOptions read;
  double cutoff = 0.0;          // Å
  /// Folder for the binary cache; empty disables it. The cache is keyed on the contents of every
  /// input file, the format, the units and the cutoff, so any change rebuilds it.
  std::string cache_dir;
};

/// Reads `source` (file or folder), builds every frame's neighbour list, and reads/writes the
/// cache. `note`, if given, receives one line saying whether the cache was used or (re)built.
std::vector<Frame> load_frames(const std::string& source, const DatasetOptions& options,
                               std::string* note = nullptr);

/// Frame from a structure: validates it and builds its neighbour list.
Frame make_frame(Structure s, double cutoff);

/// Several frames as one graph. Atoms are concatenated in frame order; edge e joins centre
/// edge_index[e] to neighbour edge_index[n_edges + e] with vector r = x_j - x_i + shift . cell.
struct GraphBatch {
  int64_t num_frames = 0;
  int64_t num_atoms = 0;
  int64_t num_edges = 0;
  std::vector<int64_t> species;         // (num_atoms) model species index
  std::vector<int64_t> frame_of_atom;   // (num_atoms)
  std::vector<int64_t> atom_offset;     // (num_frames + 1)
  std::vector<int64_t> edge_index;      // (2 * num_edges): centres, then neighbours
  std::vector<double> edge_vectors;     // (num_edges * 3) Å
  std::vector<double> positions;        // (num_atoms * 3) Å
  // Labels; a frame without a label has mask 0 and zeros in the value.
  std::vector<double> energy;           // (num_frames) eV
  std::vector<uint8_t> has_energy;      // (num_frames)
  std::vector<double> forces;           // (num_atoms * 3) eV/Å
  std::vector<uint8_t> has_forces;      // (num_frames)
  std::vector<double> virial;           // (num_frames * 9) eV
  std::vector<uint8_t> has_virial;      // (num_frames)
  std::vector<double> weight;           // (num_frames)
  std::vector<int64_t> head;            // (num_frames) Frame::head
};

/// Maps atomic numbers to model species indices: `species[k]` is the element of index k.
class SpeciesMap {
 public:
  explicit SpeciesMap(const std::vector<std::string>& species);
  /// Index of atomic number z; throws mlip::Error naming `origin` and the element if absent.
  int64_t index(int z, const std::string& origin) const;

 private:
  std::vector<int64_t> by_z_;
  std::vector<std::string> species_;
};

GraphBatch make_batch(const std::vector<const Frame*>& frames, const SpeciesMap& species);

}  // namespace mlip
