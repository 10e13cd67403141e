// A watchdog for collectives that other ranks must complete: NCCL reports a failed peer or
// network only asynchronously (its communicator's error state), and a rank whose peers never
// come waits in the all-reduce forever. Two threads, as PyTorch's NCCL watchdog has:
//  - the poller asks the health check and whether the oldest watched work has finished (calls
//    into NCCL and CUDA, which a wedged GPU can block);
//  - the monitor makes no such call: it calls `fail` once, with the reason, when the poller
//    found an error, when the oldest unfinished work has waited longer than the timeout, or when
//    the poller itself has not come back for that long.
// `fail` ends the rank's process (its main thread may be blocked in a wait that only the peers could
// end). Device-independent: the NCCL backend watches CUDA events.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace mlip::trainer {

class CollectiveWatchdog {
 public:
  using Health = std::function<std::string()>;     // empty: healthy, else why not
  using Done = std::function<bool()>;              // whether a watched piece of work has finished
  using Fail = std::function<void(const std::string&)>;

  /// `timeout`: how long one piece of work may stay unfinished (zero: no limit); `period`: how
  /// often the threads look; `poller_start`: run first on the poller's thread (e.g. choosing its
  /// GPU, so that its CUDA calls open no context on another).
  CollectiveWatchdog(Health health, Fail fail, std::chrono::milliseconds timeout, std::chrono::milliseconds period,
                     std::function<void()> poller_start = {});
  ~CollectiveWatchdog();   // stops the threads (promptly: they wait on a condition, not a sleep)
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  /// Watches a piece of work, `what` in the message if it times out. Work finishes in the order
  /// it is watched (one stream): its clock starts when it is watched or, if later, when the piece
  /// before it was seen finished (the work queued before it is not its own). Only the poller asks
  /// whether work has finished.
  /// At most kMostPending are kept: beyond, the newest replaces the last (the oldest's clock,
  /// which a timeout reads, is kept).
  void watch(std::string what, Done done);
  /// Pieces of work watched and not yet seen finished.
  std::size_t pending() const;
  static constexpr std::size_t kMostPending = 256;

 private:
  struct Work {
    std::string what;
    Done done;
    std::chrono::steady_clock::time_point since;
    uint64_t id = 0;
  };
  void poll();
  void monitor();
  bool wait_period(std::unique_lock<std::mutex>& lock);   // false once stopping
  std::string overdue(std::chrono::steady_clock::time_point now) const;   // with mutex_ held

  Health health_;
  Fail fail_;
  std::chrono::milliseconds timeout_, period_;
  std::function<void()> poller_start_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Work> pending_;
  uint64_t next_id_ = 0;
  std::string failure_;                                 // the poller's finding
  std::chrono::steady_clock::time_point poller_seen_;   // when the poller last came back
  bool stop_ = false;
  std::thread poller_, monitor_;   // last: started once everything above exists
};

}  // namespace mlip::trainer
