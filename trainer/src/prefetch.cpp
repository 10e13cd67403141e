#include "prefetch.h"

#include <chrono>

#include "mlip/error.h"

namespace mlip::trainer {

BatchPrefetcher::BatchPrefetcher(std::vector<std::vector<int64_t>> batches, Build build, std::size_t depth)
    : batches_(std::move(batches)), build_(std::move(build)), depth_(depth) {
  if (depth_ > 0 && !batches_.empty()) thread_ = std::thread([this] { run(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void BatchPrefetcher::run() {
  try {
    for (const auto& idx : batches_) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [this] { return stop_ || ready_.size() < depth_; });
        if (stop_) return;
      }
      BatchTensors t = build_(idx);
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ready_.push_back(std::move(t));
      }
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    changed_.notify_all();
  }
}

BatchTensors BatchPrefetcher::next() {
  if (taken_ >= batches_.size()) throw Error("BatchPrefetcher: no batch left");
  if (depth_ == 0) return build_(batches_[taken_++]);
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [this] { return !ready_.empty() || error_; });
  waited_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (ready_.empty()) std::rethrow_exception(error_);
  BatchTensors t = std::move(ready_.front());
  ready_.pop_front();
  ++taken_;
  lock.unlock();
  changed_.notify_all();
  return t;
}

}  // namespace mlip::trainer
