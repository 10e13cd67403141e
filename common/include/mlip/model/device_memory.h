// GPU memory as the pair style sizes its model calls by it: how much a device has free, how much
// one call took, and the number of centre atoms per call that fits (ChunkSizer). A user never has to
// find `chunk N` by trial: a call that still runs out of memory is split in two and tried again
// (evaluate_within_memory), and the sizer remembers.
//
// The figures come from libmlip_cuda_ops.so (the driver's free memory and LibTorch's caching
// allocator's statistics); on the CPU, or without that library, device_memory() has none and the
// sizer's logic is driven by the tests with figures of their own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <exception>
#include <optional>
#include <stdexcept>
#include <string>

#include <torch/types.h>

namespace mlip {

struct DeviceMemory {
  int64_t free = 0;       // the driver's free bytes
  int64_t total = 0;      // the device's bytes
  int64_t cached = 0;     // held by LibTorch's caching allocator but not in use (reusable)
  int64_t allocated = 0;  // in LibTorch's tensors now
  int64_t peak = 0;       // the most in LibTorch's tensors since reset_peak_memory()
  int64_t available() const { return free + cached; }
};

/// The memory of `device` now; none on the CPU or where libmlip_cuda_ops.so cannot be had.
std::optional<DeviceMemory> device_memory(const torch::Device& device);
/// Starts DeviceMemory::peak anew on `device` (a no-op where device_memory() has none).
void reset_peak_memory(const torch::Device& device);
/// Gives LibTorch's cached, unused GPU memory back to the driver (after an out-of-memory error);
/// false where LibTorch failed to (true without a GPU library: nothing to give back).
bool release_cached_memory();

/// Whether `e` is a device out-of-memory error (c10::OutOfMemoryError, a TorchScript error that
/// carries one's message, as mlip::Error does from inside a model, or CUDA's own); also, where
/// PYTORCH_[CUDA_]ALLOC_CONF sets max_split_size_mb, a CUDA graph's recording refused a call: with
/// that setting LibTorch's allocator answers a failed allocation by freeing its cache, which a
/// recording may not do (pytorch/pytorch#159594).
bool is_out_of_memory(const std::exception& e);
/// What a user should know of out-of-memory error `e` beyond its message, with a leading space:
/// that it was such a refused call taken for one; "" for any other.
std::string out_of_memory_note(const std::exception& e);

/// Centre atoms per model call from the memory a device has and the memory the model's calls were
/// seen to take: bytes per edge of a call (the most seen, so the estimate errs large) times edges
/// per centre of a call (the last seen: the density and, for message-passing models, the halo).
class ChunkSizer {
 public:
  /// `headroom`: the share of the available memory a call may take; `first`: centres of the first
  /// call, before anything was seen (big enough to measure, small enough to fit).
  explicit ChunkSizer(double headroom = 0.8, int64_t first = 1024) : headroom_(headroom), first_(first) {}

  /// Centres per call for `centres` local atoms with `available` bytes free for the call, at
  /// least 1; all of them when they fit.
  int64_t chunk(int64_t centres, int64_t available) const;
  /// One call's centres, edges, and the bytes it took at its peak.
  void observe(int64_t centres, int64_t edges, int64_t bytes);
  /// A call of `centres` ran out of memory: from now on calls take at most half of them, until the
  /// limit is tried higher (calm()).
  void out_of_memory(int64_t centres);
  /// A call ran, one of those evaluating `wanted` centres. An out-of-memory error may have been
  /// passing (another process's memory, fragmentation): after `retry` calls without one the limit
  /// is doubled, and dropped once it reaches `wanted`; an error within `retry` calls of a raise
  /// brings back the limit that held and doubles `retry`, so that a limit that holds costs few
  /// failed calls.
  void calm(int64_t wanted);

  bool seen() const { return bytes_per_edge_ > 0; }
  double bytes_per_edge() const { return bytes_per_edge_; }
  double bytes_per_centre() const { return bytes_per_edge_ * edges_per_centre_; }
  int64_t limit() const { return limit_; }   // from out-of-memory errors (0: none)
  int64_t retry() const { return retry_; }   // calls without an error before the limit is raised

 private:
  double headroom_;
  int64_t first_;
  double bytes_per_edge_ = 0;
  double edges_per_centre_ = 0;
  int64_t limit_ = 0;
  int64_t retry_ = 128;
  int64_t calm_calls_ = 0;   // since the last error or raise
  int64_t held_ = 0;         // the limit before a raise (or drop) less than a wait ago; 0: none
};

/// The size of equal calls of at most `chunk` items over n (1152 atoms in calls of at most 1024:
/// two of 576, not 1024 and 128).
inline int64_t equal_chunk(int64_t n, int64_t chunk) {
  const int64_t calls = (n + std::max<int64_t>(chunk, 1) - 1) / std::max<int64_t>(chunk, 1);
  return calls > 0 ? (n + calls - 1) / calls : 1;
}

/// evaluate(first, last) over centres [first, last) in calls of the sizer's chunk, in order; a call
/// that runs out of device memory (is_out_of_memory: LibTorch's errors, std::runtime_error and
/// mlip::Error) is split in two and tried again, down to one centre (then the error is thrown).
/// evaluate must have added nothing when it throws such an error: the retried call adds it. Other
/// exceptions go on whatever they say (LAMMPS's error->one throws its own with the message of an
/// error it already reported). `available()` gives the bytes free for calls now; `wanted`: the centres of the
/// caller's step, where [first, last) is one of its chunks (ChunkSizer::calm). The calls after the
/// first one the sizer measured are sized anew (before it, calls take its first size: at 1M atoms
/// the first step would otherwise run in a thousand calls).
template <class Evaluate, class Available>
void evaluate_within_memory(int64_t first, int64_t last, ChunkSizer& sizer, Available&& available,
                            Evaluate&& evaluate, int64_t wanted = 0) {
  int64_t size = equal_chunk(last - first, sizer.chunk(last - first, available()));
  for (int64_t begin = first; begin < last;) {
    const int64_t end = std::min(last, begin + size);
    const bool measured = sizer.seen();
    try {
      evaluate(begin, end);
    } catch (const std::exception& e) {
      const bool ours = dynamic_cast<const c10::Error*>(&e) != nullptr || dynamic_cast<const std::runtime_error*>(&e) != nullptr;
      if (!ours || !is_out_of_memory(e) || end - begin == 1) throw;
      sizer.out_of_memory(end - begin);
      release_cached_memory();
      size = std::max<int64_t>(1, (end - begin) / 2);
      continue;   // this call again, in halves
    }
    sizer.calm(std::max(wanted, last - first));
    begin = end;
    if (!measured && sizer.seen() && begin < last) size = equal_chunk(last - begin, sizer.chunk(last - begin, available()));
  }
}

}  // namespace mlip
