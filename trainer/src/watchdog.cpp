#include "watchdog.h"

#include <fmt/format.h>

#include <utility>

namespace mlip::trainer {

CollectiveWatchdog::CollectiveWatchdog(Health health, Fail fail, std::chrono::milliseconds timeout,
                                       std::chrono::milliseconds period)
    : health_(std::move(health)), fail_(std::move(fail)), timeout_(timeout), period_(period),
      thread_([this] { run(); }) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void CollectiveWatchdog::watch(std::string what, Done done) {
  const std::lock_guard<std::mutex> lock(mutex_);
  drop_finished();
  pending_.push_back({std::move(what), std::move(done), std::chrono::steady_clock::now()});
}

std::size_t CollectiveWatchdog::pending() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return pending_.size();
}

void CollectiveWatchdog::drop_finished() {
  while (!pending_.empty() && pending_.front().done()) pending_.pop_front();
}

std::string CollectiveWatchdog::overdue() const {
  if (timeout_.count() <= 0 || pending_.empty()) return {};
  const auto waited = std::chrono::steady_clock::now() - pending_.front().since;
  if (waited < timeout_) return {};
  return fmt::format("{} has not finished after {:.0f} s (communication.timeout): a rank stopped taking part",
                     pending_.front().what, std::chrono::duration<double>(waited).count());
}

void CollectiveWatchdog::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, period_, [this] { return stop_; });
    if (stop_) return;
    drop_finished();
    std::string why = overdue();
    if (why.empty()) {
      lock.unlock();   // the health check may take a while (a call into NCCL): watch() is not held up
      why = health_();
      lock.lock();
    }
    if (!why.empty()) {
      lock.unlock();
      fail_(why);      // ends the job; if it returns (a test), the watchdog stops looking
      lock.lock();
      return;
    }
  }
}

}  // namespace mlip::trainer
