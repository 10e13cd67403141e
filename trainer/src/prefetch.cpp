#include "prefetch.h"

#include <optional>

#include <c10/core/DeviceGuard.h>

#include "recorded_step.h"
#include "mlip/error.h"
#include "mlip/model/runtime.h"

namespace mlip::trainer {

template <class Batch>
Prefetcher<Batch>::Prefetcher(std::size_t count, Indices indices, Build build, std::size_t depth, torch::Device device)
    : count_(count), indices_(std::move(indices)), build_(std::move(build)), depth_(depth), device_(device) {
  if (depth_ > 0 && count_ > 0) thread_ = std::thread([this] { run(); });
}

template <class Batch>
Prefetcher<Batch>::~Prefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

template <class Batch>
void Prefetcher<Batch>::run() {
  try {
    // On the CPU, beside the step's threads, not a second team of as many. On a GPU the step
    // leaves the cores to this thread, which keeps ATen's count (never measured either way).
    if (device_.is_cpu()) use_one_thread_here();
    std::optional<c10::DeviceGuard> on_device;
    if (device_.is_cuda()) on_device.emplace(device_);
    for (std::size_t k = 0; k < count_; ++k) {
      const std::vector<int64_t> idx = indices_(k);
      if (idx.empty()) continue;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return stop_ || ready_.size() < depth_; });
        if (stop_) return;
      }
      Batch t = build_(idx);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.push_back(std::move(t));
      }
      changed_.notify_all();
    }
    std::lock_guard<std::mutex> lock(mutex_);
    finished_ = true;
    changed_.notify_all();
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    changed_.notify_all();
  }
}

template <class Batch>
Batch Prefetcher<Batch>::next() {
  if (depth_ == 0) {
    while (next_ < count_) {
      const std::vector<int64_t> idx = indices_(next_++);
      if (!idx.empty()) return build_(idx);
    }
    throw Error("Prefetcher: no batch left");
  }
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !ready_.empty() || error_ || finished_; });
  if (ready_.empty()) {
    if (error_) std::rethrow_exception(error_);
    throw Error("Prefetcher: no batch left");
  }
  Batch t = std::move(ready_.front());
  ready_.pop_front();
  lock.unlock();
  changed_.notify_all();
  return t;
}

template class Prefetcher<BatchTensors>;
template class Prefetcher<ReadyBatch>;

}  // namespace mlip::trainer
