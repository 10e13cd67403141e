// Where the time of training steps goes. On the CPU a part's time is the host's clock from its
// start to its end. On a GPU the host runs ahead of the device and waits wherever the launch
// queue fills or a value is read, so its clock says where the host waited, not where the GPU
// spent its time (an NCCL all-reduce read as almost nothing: its call only enqueues). There a
// part's time is the stream's, between timing events recorded at its start and end (gaps where
// the GPU waited for the host included), read once the GPU got there.
#pragma once

#include <chrono>
#include <deque>
#include <optional>
#include <vector>

#include <c10/core/Event.h>
#include <torch/types.h>

namespace mlip::trainer {

class PartClock {
 public:
  explicit PartClock(const torch::Device& device) : device_(device) {}
  /// A part begins here (now on the host; on a GPU, at this point of the current stream).
  void start();
  /// The part begun by start() ends here; its seconds are added to `*into`: at once on the
  /// CPU, on a GPU when a later call finds the GPU past this point (settle(): at the latest).
  void stop(double* into);
  /// Waits for the GPU to reach every part's end and adds the parts' times: before the totals
  /// are read.
  void settle();
  bool on_device() const { return device_.is_cuda(); }

 private:
  struct Part {
    c10::Event begin, end;
    double* into;
  };
  c10::Event event();            // a timing event, reused
  void add_finished(bool wait);  // the parts' times whose end the GPU has reached (or all)

  torch::Device device_;
  std::chrono::steady_clock::time_point started_;
  std::vector<c10::Event> free_;
  std::deque<Part> pending_;
  std::optional<c10::Event> begin_;
};

}  // namespace mlip::trainer
