#include "step_clock.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <utility>

namespace mlip::trainer {

namespace {
c10::Stream current_stream(const torch::Device& device) {
  return c10::impl::getDeviceGuardImpl(device.type())->getStream(device);
}
}  // namespace

c10::Event PartClock::event() {
  if (free_.empty()) return c10::Event(device_.type(), c10::EventFlag::BACKEND_DEFAULT);   // timing on
  c10::Event e = std::move(free_.back());
  free_.pop_back();
  return e;
}

void PartClock::start() {
  if (!on_device()) {
    started_ = std::chrono::steady_clock::now();
    return;
  }
  add_finished(/*wait=*/false);   // keeps the events in flight few
  begin_.emplace(event());
  begin_->record(current_stream(device_));
}

void PartClock::stop(double* into) {
  if (!on_device()) {
    *into += std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
    return;
  }
  if (!begin_) return;
  c10::Event end = event();
  end.record(current_stream(device_));
  pending_.push_back({std::move(*begin_), std::move(end), into});
  begin_.reset();
}

void PartClock::settle() { add_finished(/*wait=*/true); }

void PartClock::add_finished(bool wait) {
  while (!pending_.empty()) {
    Part& p = pending_.front();
    if (wait)
      p.end.synchronize();
    else if (!p.end.query())
      return;
    *p.into += p.begin.elapsedTime(p.end) / 1000.0;   // ms
    free_.push_back(std::move(p.begin));
    free_.push_back(std::move(p.end));
    pending_.pop_front();
  }
}

}  // namespace mlip::trainer
