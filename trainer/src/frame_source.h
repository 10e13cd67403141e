// Training and validation frames by index, wherever they are: parsed into memory (extended XYZ,
// DeePMD, n2p2, FitSNAP, ASE databases: through the cache of mlip/data/dataset.h), or read from a
// pack (mlip/data/pack.h) frame by frame when a batch needs them, so that a data set larger than
// memory trains in bounded memory. Every source also gives the statistics the trainer fits its
// energy shift, scale and priors to (PackStats): accumulated here for frames in memory, taken
// from the manifest for a pack - the same sums either way, so both paths train bitwise alike.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "mlip/data/dataset.h"
#include "mlip/data/pack.h"
#include "permutation.h"

namespace mlip::trainer {

class FrameSource {
 public:
  virtual ~FrameSource() = default;
  virtual std::size_t size() const = 0;
  /// Atoms of frame i (a pack: from its index, all read on first use; other streamed sources:
  /// kept from their statistics pass). Safe from several threads.
  virtual int64_t atoms(std::size_t i) const = 0;
  /// Frames `idx`, in order: pointers into the source where it holds them, else into `storage`
  /// (cleared and filled here; it must outlive the pointers). Safe from several threads.
  virtual std::vector<const Frame*> frames(const std::vector<int64_t>& idx, std::vector<Frame>& storage) const = 0;
  /// Statistics of every frame of the source.
  virtual const PackStats& stats() const = 0;
  /// Whether frames are read from disk as they are needed.
  virtual bool streamed() const = 0;
};

/// Frames parsed into memory.
std::shared_ptr<FrameSource> memory_source(std::vector<Frame> frames);

/// A pack's frames, read as needed, each frame's weight multiplied by `weight`, its head set to
/// `head` (Frame::head) and its neighbour list built for `cutoff`.
std::shared_ptr<FrameSource> pack_source(const std::string& dir, double weight, double cutoff, int head = -1);

/// Frames read one at a time from `reader` (extended XYZ by its offset index, ASE databases),
/// each frame's weight multiplied by `weight`, its head `head`, its neighbour list built for `cutoff`. The
/// statistics take one pass over the frames when first asked for (in blocks: bounded memory),
/// which keeps their atom counts too (4 bytes a frame).
std::shared_ptr<FrameSource> reader_source(std::unique_ptr<FrameReader> reader, double weight, double cutoff,
                                           int head = -1);

/// Sources one after the other.
std::shared_ptr<FrameSource> concat_sources(std::vector<std::shared_ptr<FrameSource>> parts);

/// Frames order(first), ..., order(first + count - 1) of `base` (order.size() == base->size()), in
/// that order, with no list of indices. Statistics: of those frames where `base` holds them in
/// memory; of all of `base`'s frames where it streams (no pass over the data at start).
std::shared_ptr<FrameSource> subset_source(std::shared_ptr<FrameSource> base, const Permutation& order, uint64_t first,
                                           uint64_t count);

}  // namespace mlip::trainer
