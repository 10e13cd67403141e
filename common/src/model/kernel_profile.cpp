#include "mlip/model/kernel_profile.h"
#include "mlip/model/device.h"

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <utility>

#include <kineto/ActivityType.h>
#include <torch/csrc/autograd/profiler_kineto.h>

#include "mlip/error.h"

namespace mlip {

namespace {

namespace kp = torch::autograd::profiler;
namespace pi = torch::profiler::impl;
using libkineto::ActivityType;

const char* const kKinds[] = {"kernel", "copy", "memset", "runtime", "operator"};

// The row kind of a profiler event, or nullptr for those not counted (annotations, syncs' markers).
const char* kind_of(const kp::KinetoEvent& e) {
  switch (static_cast<ActivityType>(e.activityType())) {
    case ActivityType::CONCURRENT_KERNEL: return "kernel";
    case ActivityType::GPU_MEMCPY: return "copy";
    case ActivityType::GPU_MEMSET: return "memset";
    case ActivityType::CUDA_RUNTIME:
    case ActivityType::CUDA_DRIVER: return "runtime";
    case ActivityType::CPU_OP: return "operator";
    default: return nullptr;
  }
}

bool launches(const std::string& name) { return name.find("Launch") != std::string::npos; }
bool waits(const std::string& name) { return name.find("Synchronize") != std::string::npos; }

// Self time of the host's events: each one's duration less that of the events directly inside it
// (on its thread; an operator's CUDA calls count as the calls', not the operator's).
std::vector<double> self_seconds(const std::vector<const kp::KinetoEvent*>& host) {
  std::map<uint64_t, std::vector<std::size_t>> by_thread;
  for (std::size_t i = 0; i < host.size(); ++i) by_thread[host[i]->startThreadId()].push_back(i);
  std::vector<double> self(host.size());
  for (auto& [thread, order] : by_thread) {
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return std::make_pair(host[a]->startNs(), -static_cast<int64_t>(host[a]->durationNs())) <
             std::make_pair(host[b]->startNs(), -static_cast<int64_t>(host[b]->durationNs()));
    });
    std::vector<std::size_t> open;
    for (const std::size_t i : order) {
      while (!open.empty() && host[open.back()]->endNs() <= host[i]->startNs()) open.pop_back();
      self[i] = host[i]->durationNs() * 1e-9;
      if (!open.empty()) self[open.back()] -= host[i]->durationNs() * 1e-9;
      open.push_back(i);
    }
  }
  for (double& s : self) s = std::max(s, 0.0);
  return self;
}

ProfileSummary summarise(const std::vector<kp::KinetoEvent>& events, double wall_seconds, bool gpu) {
  ProfileSummary s;
  s.wall_seconds = wall_seconds;
  s.gpu = gpu;
  std::vector<const kp::KinetoEvent*> host;
  for (const auto& e : events) {
    const char* kind = kind_of(e);
    if (kind && (!std::strcmp(kind, "runtime") || !std::strcmp(kind, "operator"))) host.push_back(&e);
  }
  // The last host event on a GPU is stop()'s own wait for the GPU: not the profiled work's.
  const auto last = std::max_element(host.begin(), host.end(), [](const kp::KinetoEvent* a, const kp::KinetoEvent* b) {
    return a->startNs() < b->startNs();
  });
  if (gpu && last != host.end() && !std::strcmp(kind_of(**last), "runtime") && waits((*last)->name())) host.erase(last);
  const std::vector<double> self = self_seconds(host);
  std::map<std::pair<std::string, std::string>, ProfileRow> rows;
  auto add = [&](const char* kind, const std::string& name, double seconds) {
    ProfileRow& r = rows[{kind, name}];
    r.kind = kind;
    r.name = name;
    r.calls++;
    r.seconds += seconds;
  };
  for (std::size_t i = 0; i < host.size(); ++i) {
    const std::string name = host[i]->name();
    const char* kind = kind_of(*host[i]);
    const double seconds = !std::strcmp(kind, "runtime") ? host[i]->durationNs() * 1e-9 : self[i];
    add(kind, name, seconds);
    if (!std::strcmp(kind, "runtime") && launches(name)) s.launches++;
    if (!std::strcmp(kind, "runtime") && waits(name)) {
      s.waits++;
      s.wait_seconds += host[i]->durationNs() * 1e-9;
    }
  }
  for (const auto& e : events) {
    const char* kind = kind_of(e);
    if (!kind || !std::strcmp(kind, "runtime") || !std::strcmp(kind, "operator")) continue;
    add(kind, e.name(), e.durationNs() * 1e-9);
    s.gpu_seconds += e.durationNs() * 1e-9;
    if (!std::strcmp(kind, "kernel")) s.kernels++;
  }
  for (const char* kind : kKinds) {
    std::vector<ProfileRow> of_kind;
    for (auto& [key, row] : rows)
      if (key.first == kind) of_kind.push_back(std::move(row));
    std::sort(of_kind.begin(), of_kind.end(), [](const ProfileRow& a, const ProfileRow& b) {
      return a.seconds > b.seconds || (a.seconds == b.seconds && a.name < b.name);
    });
    for (auto& r : of_kind) s.rows.push_back(std::move(r));
  }
  return s;
}

std::string printed(const char* format, ...) {
  va_list args;
  va_start(args, format);
  char buffer[512];
  std::vsnprintf(buffer, sizeof buffer, format, args);
  va_end(args);
  return buffer;
}

std::string shortened(const std::string& name, std::size_t most = 96) {
  std::string n = name.rfind("void ", 0) == 0 ? name.substr(5) : name;
  return n.size() <= most ? n : n.substr(0, most - 3) + "...";
}

}  // namespace

double ProfileSummary::seconds(const std::string& kind) const {
  double total = 0;
  for (const auto& r : rows)
    if (r.kind == kind) total += r.seconds;
  return total;
}

KernelProfile::KernelProfile(const torch::Device& device) : device_(device) {
  const bool gpu = device.is_cuda();
  if (pi::profilerEnabled())
    throw Error("LibTorch's profiler is already on in this process (one profile at a time)");
  // Without a GPU, Kineto's start logs an ERROR line about counting GPUs: its errors are shown
  // only where the GPU is profiled (KINETO_LOG_LEVEL, when not set: 5 hides its ERROR level).
  if (!gpu) setenv("KINETO_LOG_LEVEL", "5", /*overwrite=*/0);
  const pi::ProfilerConfig config(pi::ProfilerState::KINETO);
  std::set<pi::ActivityType> activities{pi::ActivityType::CPU};
  if (gpu) activities.insert(pi::ActivityType::CUDA);
  kp::prepareProfiler(config, activities);
  synchronize(device_);   // the GPU's queued work done, so that the wall time holds only what follows
  kp::enableProfiler(config, activities);
  running_ = true;
  start_ = std::chrono::steady_clock::now();
}

KernelProfile::~KernelProfile() {
  if (running_) try {
      kp::disableProfiler();
    } catch (...) {
    }
}

ProfileSummary KernelProfile::stop() {
  if (!running_) throw std::logic_error("KernelProfile::stop: not running");
  synchronize(device_);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  running_ = false;
  const std::unique_ptr<kp::ProfilerResult> result = kp::disableProfiler();
  return summarise(result->events(), wall, device_.is_cuda());
}

std::string format_profile(const ProfileSummary& s, const std::string& prefix, double per,
                           const std::string& per_name, int top) {
  const double k = 1e3 / std::max(per, 1.0);   // ms per `per_name`
  const char* per_c = per_name.c_str();
  std::string out = prefix + printed("wall %.3f ms per %s", s.wall_seconds * k, per_c);
  if (s.kernels || s.gpu_seconds > 0)
    out += printed("; GPU busy %.3f ms (%.0f%% of the wall: %.1f kernels, copies %.3f ms)", s.gpu_seconds * k,
                   100.0 * s.gpu_seconds / std::max(s.wall_seconds, 1e-12), s.kernels * k / 1e3,
                   (s.seconds("copy") + s.seconds("memset")) * k);
  else if (s.gpu)
    out += "; no GPU activity recorded (CUPTI unavailable to LibTorch's profiler?)";
  if (s.launches || s.waits)
    out += printed("; host: %.1f launches, %.1f waits for the GPU taking %.3f ms", s.launches * k / 1e3,
                   s.waits * k / 1e3, s.wait_seconds * k);
  out += printed("; host operators' self time %.3f ms\n", s.seconds("operator") * k);
  out += prefix + printed("%9s %7s %8s  %-8s %s\n", ("ms/" + per_name.substr(0, 5)).c_str(), "share",
                          ("n/" + per_name.substr(0, 5)).c_str(), "kind", "name");
  for (const char* kind : kKinds) {
    const double total = s.seconds(kind);
    int shown = 0;
    for (const auto& r : s.rows) {
      if (r.kind != kind || shown++ >= top) continue;
      out += prefix + printed("%9.4f %6.1f%% %8.1f  %-8s %s\n", r.seconds * k, 100.0 * r.seconds / std::max(total, 1e-12),
                              r.calls * k / 1e3, r.kind.c_str(), shortened(r.name).c_str());
    }
  }
  return out;
}

}  // namespace mlip
