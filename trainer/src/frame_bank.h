// The training frames kept on the device for the recorded training step (training.cuda_graph
// with training.data_on_device): each frame grouped as group_batch() groups a batch (atoms by
// species, edges by embedding net and centre), the frames one after another in one tensor per
// label, and a padding row at the end of each. The recorded step's padded batch, what
// pad_batch(group_batch(concat(frames))) makes, is gathered from the bank by one index_select per
// tensor, with indices the host makes from each frame's group sizes (in the prefetching thread):
// about 20 kernels and one copy a step, where concat, group_batch and pad_batch take over a
// hundred small kernels at 16 frames, each a launch the host pays while the GPU waits.
#pragma once

#include <cstdint>
#include <vector>

#include <torch/torch.h>

#include "recorded_step.h"
#include "training.h"

namespace mlip::trainer {

/// A batch of a bank's frames: its group sizes and, made on the host for a capacity, where each
/// row of the padded batch comes from.
struct BankBatch {
  std::vector<int64_t> frames;   // the bank's frame indices
  BatchTensors shape;            // the grouped batch's sizes (n_frames, n_atoms, groups, any_virial); no tensors
  BatchCapacity capacity;        // what `rows` was made for
  torch::Tensor rows;            // int64 on the host (pinned for a GPU): FrameBank::make_rows
};

class FrameBank {
 public:
  /// The frames of `source` (to_tensors of each, in `dtype`) grouped by `rule`, on `device`,
  /// moved there in pieces of about `piece_bytes` as they are read (the host holds one piece; the
  /// device, at the end, the bank and one more copy of its largest tensor).
  FrameBank(const FrameSource& source, const SpeciesMap& species, torch::Dtype dtype, const GroupingRule& rule,
            const torch::Device& device, int64_t piece_bytes = int64_t{64} << 20);

  /// The batch of these frames (each at most once) with rows for `expected` grown by the batch
  /// (fit_capacity), as the step will grow it if it starts from `expected` (host only: a
  /// prefetching thread may call it).
  BankBatch batch(std::vector<int64_t> frames, BatchCapacity expected) const;
  /// b.rows made anew for `cap` (which b fits): the padded batch's atoms' bank rows, their frames
  /// in the batch, its edges' and its frames' bank rows (the padding rows for padding atoms and
  /// frames; for a padding edge -1 - the padding atom it joins to itself, padding_edge_ends()).
  void make_rows(BankBatch& b, const BatchCapacity& cap) const;
  /// The padded batch `b` written into `into`'s tensors (made anew where their shapes differ), as
  /// pad_batch(group_batch(concat(b's frames)), b.capacity, rule.pad_length, into) writes it.
  void gather(const BankBatch& b, BatchTensors& into);
  /// batch() as the recorded step takes it (its fill gathers, with rows made anew for another
  /// capacity); the fill uses this bank, which must outlive it.
  ReadyBatch ready(std::vector<int64_t> frames, const BatchCapacity& expected);

  std::size_t size() const { return has_virial_.size(); }
  /// Bytes the bank holds on its device.
  int64_t bytes() const;

 private:
  // A run of one frame's rows in the bank: its atoms of one species (group: the species), or its
  // edges of one (centre species, neighbour species) pair (group: the net, centre: the centre's
  // species), which group_batch puts in the batch's group `group`, ordered by `centre` then frame.
  struct Run {
    int64_t group, centre, first, count;
  };
  // Frame f's runs: atom_runs_[atom_run_at_[f] .. atom_run_at_[f + 1]), the same for edges.
  std::vector<Run> atom_runs_, edge_runs_;
  std::vector<int64_t> atom_run_at_{0}, edge_run_at_{0};
  // The runs of the next frame, `b` (one frame, grouped), at the bank's current ends.
  void add_runs(const BatchTensors& b);
  // The batch's runs in the padded batch's order, each with the batch frame it belongs to.
  static std::vector<std::pair<Run, int64_t>> in_batch_order(const std::vector<Run>& runs,
                                                             const std::vector<int64_t>& at,
                                                             const std::vector<int64_t>& frames);

  GroupingRule rule_;
  torch::Device device_;
  std::vector<uint8_t> has_virial_;
  int64_t n_atoms_ = 0, n_edges_ = 0;            // rows before the padding row
  // Per atom, per edge and per frame, the padding row last (a padding atom's labels, a padding
  // edge beyond the cutoff from the padding atom to itself, a padding frame with no labels).
  torch::Tensor forces_, has_forces_atom_, edge_index_, edge_vectors_;
  torch::Tensor atoms_per_frame_, energy_, has_energy_, virial_, has_virial_t_, weight_;
  torch::Tensor node_;   // a bank atom's node in the batch being gathered (int64, one per atom row)
  torch::Tensor iota_;   // 0, 1, 2, ... on the device, as long as the largest batch's atoms (kept: no kernel a step)
};

}  // namespace mlip::trainer
