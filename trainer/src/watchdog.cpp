#include "watchdog.h"

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace mlip::trainer {

CollectiveWatchdog::CollectiveWatchdog(Health health, Fail fail, std::chrono::milliseconds timeout,
                                       std::chrono::milliseconds period, std::function<void()> poller_start)
    : health_(std::move(health)), fail_(std::move(fail)), timeout_(timeout), period_(period),
      poller_start_(std::move(poller_start)), poller_seen_(std::chrono::steady_clock::now()),
      poller_([this] { poll(); }), monitor_([this] { monitor(); }) {}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  poller_.join();
  monitor_.join();
}

void CollectiveWatchdog::watch(std::string what, Done done) {
  const std::lock_guard<std::mutex> lock(mutex_);
  Work work{std::move(what), std::move(done), std::chrono::steady_clock::now(), next_id_++};
  if (pending_.size() >= kMostPending)
    pending_.back() = std::move(work);
  else
    pending_.push_back(std::move(work));
}

std::size_t CollectiveWatchdog::pending() const {
  const std::lock_guard<std::mutex> lock(mutex_);
  return pending_.size();
}

bool CollectiveWatchdog::wait_period(std::unique_lock<std::mutex>& lock) {
  wake_.wait_for(lock, period_, [this] { return stop_; });
  return !stop_;
}

// Finished work dropped (asked outside the lock: watch() is never held up by a call into the
// GPU), then the health check; what it finds is the monitor's to report.
void CollectiveWatchdog::poll() {
  if (poller_start_) poller_start_();
  std::unique_lock<std::mutex> lock(mutex_);
  while (wait_period(lock)) {
    while (!pending_.empty()) {
      const Done done = pending_.front().done;
      const uint64_t id = pending_.front().id;
      lock.unlock();
      const bool finished = done();
      lock.lock();
      if (!finished || pending_.empty() || pending_.front().id != id) break;
      pending_.pop_front();
      // The next piece waited behind this one (one stream): its own clock starts now, so that a
      // rank whose host ran steps ahead of its GPU does not count their work against the next.
      if (!pending_.empty()) pending_.front().since = std::max(pending_.front().since, std::chrono::steady_clock::now());
    }
    lock.unlock();
    std::string why = health_();
    lock.lock();
    poller_seen_ = std::chrono::steady_clock::now();
    if (!why.empty() && failure_.empty()) failure_ = std::move(why);
  }
}

std::string CollectiveWatchdog::overdue(std::chrono::steady_clock::time_point now) const {
  if (!failure_.empty()) return failure_;
  if (timeout_.count() <= 0) return {};
  auto seconds = [](auto d) { return std::chrono::duration<double>(d).count(); };
  if (!pending_.empty() && now - pending_.front().since >= timeout_)
    return fmt::format("{} has not finished after {:.0f} s (communication.timeout): a rank stopped taking part",
                       pending_.front().what, seconds(now - pending_.front().since));
  if (now - poller_seen_ >= timeout_)
    return fmt::format("the watchdog's calls into NCCL and the GPU have not returned for {:.0f} s "
                       "(communication.timeout): the GPU or NCCL is stuck", seconds(now - poller_seen_));
  return {};
}

void CollectiveWatchdog::monitor() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (wait_period(lock)) {
    const std::string why = overdue(std::chrono::steady_clock::now());
    if (why.empty()) continue;
    lock.unlock();
    fail_(why);      // ends the process; if it returns (a test), the watchdog stops reporting
    return;
  }
}

}  // namespace mlip::trainer
