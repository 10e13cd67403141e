// Batches built ahead of the training step, in a background thread: a pack's frames read from
// disk, their neighbour lists and the batch's host tensors, while the step before runs. The
// order is the one given, so a run with prefetching trains bitwise as one without.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "training.h"

namespace mlip::trainer {

/// `Batch`: BatchTensors (a batch's tensors), or ReadyBatch (a batch made ready for the recorded step).
template <class Batch> class Prefetcher {
 public:
  using Build = std::function<Batch(const std::vector<int64_t>&)>;
  using Indices = std::function<std::vector<int64_t>(std::size_t)>;
  /// Builds the batches of frames indices(0), ..., indices(count - 1) in order, skipping empty
  /// ones, at most `depth` ahead of the one next() returns (0: each built by next() itself).
  /// `device`: the thread's current device (the training's GPU: its CUDA calls, pinned host
  /// memory's too, made on it, not on GPU 0 of every rank).
  Prefetcher(std::size_t count, Indices indices, Build build, std::size_t depth,
             torch::Device device = torch::kCPU);
  ~Prefetcher();  // stops the thread (batches not taken are dropped)
  Prefetcher(const Prefetcher&) = delete;
  Prefetcher& operator=(const Prefetcher&) = delete;

  /// The next batch (waits for it); rethrows the error building it raised (a damaged shard, say).
  Batch next();

 private:
  void run();

  std::size_t count_;
  Indices indices_;
  Build build_;
  std::size_t depth_;
  torch::Device device_;
  std::size_t next_ = 0;   // the next index next() looks at when there is no thread
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Batch> ready_;
  std::exception_ptr error_;
  bool stop_ = false;
  bool finished_ = false;   // the thread built every batch
  std::thread thread_;
};

using BatchPrefetcher = Prefetcher<BatchTensors>;

}  // namespace mlip::trainer
