// A watchdog for collectives that other ranks must complete: NCCL reports a failed peer or
// network only asynchronously (its communicator's error state), and a rank whose peers never
// come waits in the all-reduce forever. The watchdog's thread polls a health check and the
// oldest unfinished piece of watched work, and calls `fail` once, with the reason, when either
// says the run cannot go on; `fail` ends the job (a rank's main thread may be blocked in a wait
// that only the peers could end). Device-independent: the NCCL backend watches CUDA events.
#pragma once

#include <chrono>
#include <condition_variable>
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
  /// often the thread looks.
  CollectiveWatchdog(Health health, Fail fail, std::chrono::milliseconds timeout, std::chrono::milliseconds period);
  ~CollectiveWatchdog();   // stops the thread (promptly: it waits on a condition, not a sleep)
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  /// Starts the clock on a piece of work, `what` in the message if it times out. Work finishes
  /// in the order it is watched (one stream): finished work at the front is dropped here too,
  /// so a fast run holds few entries between the thread's looks.
  void watch(std::string what, Done done);
  /// Pieces of work watched and not yet seen finished.
  std::size_t pending() const;

 private:
  struct Work {
    std::string what;
    Done done;
    std::chrono::steady_clock::time_point since;
  };
  void run();
  void drop_finished();           // with mutex_ held
  std::string overdue() const;    // with mutex_ held: why the oldest work is overdue, or empty

  Health health_;
  Fail fail_;
  std::chrono::milliseconds timeout_, period_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Work> pending_;
  bool stop_ = false;
  std::thread thread_;   // last: started once everything above exists
};

}  // namespace mlip::trainer
