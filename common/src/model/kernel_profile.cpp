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

const char* const kKinds[] = {"kernel", "copy", "memset", "runtime", "operator", "work"};

// Operators that only make a view or allocate: no kernel on any device.
bool views_or_allocates(const std::string& name) {
  static const std::set<std::string> names = {
      "aten::view", "aten::as_strided", "aten::narrow", "aten::select", "aten::slice", "aten::unsqueeze",
      "aten::squeeze", "aten::expand", "aten::t", "aten::transpose", "aten::permute", "aten::reshape",
      "aten::_reshape_alias", "aten::alias", "aten::detach", "aten::detach_", "aten::empty", "aten::empty_strided",
      "aten::empty_like", "aten::resize_", "aten::lift_fresh", "aten::result_type", "aten::_unsafe_view",
      "aten::view_as", "aten::split", "aten::split_with_sizes", "aten::unbind", "aten::chunk", "aten::diagonal",
      "aten::contiguous", "aten::resolve_conj", "aten::resolve_neg", "aten::set_", "aten::to", "aten::expand_as",
      "aten::unflatten", "aten::flatten", "aten::_nested_tensor_from_mask_left_aligned", "aten::numpy_T",
      "aten::_has_compatible_shallow_copy_type", "aten::is_nonzero", "aten::item", "aten::movedim",
      "aten::broadcast_tensors", "aten::unfold", "aten::pin_memory", "aten::_pin_memory", "aten::record_stream",
      "aten::empty_permuted", "aten::type_as", "aten::align_tensors", "aten::retain_grad", "aten::requires_grad_"};
  return names.count(name) > 0;
}

// An operator that runs its work as one launch on a GPU whatever it calls on the host: ATen's
// foreach and fused operators (on the CPU a loop of one operator per tensor).
bool one_launch(const std::string& name) {
  return name.rfind("aten::_foreach_", 0) == 0 || name.rfind("aten::_fused_", 0) == 0;
}

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

bool is_operator(const kp::KinetoEvent& e) { return static_cast<ActivityType>(e.activityType()) == ActivityType::CPU_OP; }

bool launches(const std::string& name) { return name.find("Launch") != std::string::npos; }
bool waits(const std::string& name) { return name.find("Synchronize") != std::string::npos; }

// Self time of the host's events: each one's duration less that of the events directly inside it
// (on its thread; an operator's CUDA calls count as the calls', not the operator's). With `work`,
// whether each is an operator that does work itself (work_on_host()).
std::vector<double> self_seconds(const std::vector<const kp::KinetoEvent*>& host, std::vector<bool>* work = nullptr) {
  std::map<uint64_t, std::vector<std::size_t>> by_thread;
  for (std::size_t i = 0; i < host.size(); ++i) by_thread[host[i]->startThreadId()].push_back(i);
  std::vector<double> self(host.size());
  // busy: an operator that does work or holds one that does (not only views and allocations);
  // parent: one that holds a busy operator (its work is theirs).
  std::vector<bool> parent(host.size(), false), busy(host.size(), false), inside_one_launch(host.size(), false);
  for (auto& [thread, order] : by_thread) {
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
      return std::make_pair(host[a]->startNs(), -static_cast<int64_t>(host[a]->durationNs())) <
             std::make_pair(host[b]->startNs(), -static_cast<int64_t>(host[b]->durationNs()));
    });
    std::vector<std::size_t> open;
    std::vector<std::ptrdiff_t> up(order.size(), -1);   // each one's place in `order` of the event holding it
    for (std::size_t k = 0; k < order.size(); ++k) {
      const std::size_t i = order[k];
      while (!open.empty() && host[order[open.back()]]->endNs() <= host[i]->startNs()) open.pop_back();
      self[i] = host[i]->durationNs() * 1e-9;
      if (!open.empty()) {
        const std::size_t p = order[open.back()];
        self[p] -= host[i]->durationNs() * 1e-9;
        up[k] = static_cast<std::ptrdiff_t>(open.back());
        inside_one_launch[i] = inside_one_launch[p] || one_launch(host[p]->name());
      }
      open.push_back(k);
    }
    // Inner events before the events holding them: busy and parent from the inside out.
    for (std::size_t k = order.size(); k-- > 0;) {
      const std::size_t i = order[k];
      if (!is_operator(*host[i])) continue;
      busy[i] = parent[i] || !views_or_allocates(host[i]->name());
      if (busy[i] && up[k] >= 0) parent[order[static_cast<std::size_t>(up[k])]] = true;
    }
  }
  if (work) {
    work->assign(host.size(), false);
    for (std::size_t i = 0; i < host.size(); ++i) {
      const std::string name = host[i]->name();
      const bool named = name.rfind("aten::", 0) == 0 || name.rfind("mlip::", 0) == 0;
      (*work)[i] = is_operator(*host[i]) && named && !inside_one_launch[i] &&
                   (one_launch(name) || (!parent[i] && !views_or_allocates(name)));
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
  std::vector<bool> work;
  const std::vector<double> self = self_seconds(host, &work);
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
    if (work[i]) {
      add("work", name, self[i]);
      s.work_operators++;
    }
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
    // The operators doing work by their count (what a GPU's launches would be), the rest by time.
    const bool by_calls = !std::strcmp(kind, "work");
    std::sort(of_kind.begin(), of_kind.end(), [by_calls](const ProfileRow& a, const ProfileRow& b) {
      if (by_calls && a.calls != b.calls) return a.calls > b.calls;
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
  out += printed("; host operators' self time %.3f ms", s.seconds("operator") * k);
  if (!s.gpu) out += printed("; %.1f operators doing work (a GPU's kernels, estimated)", s.work_operators * k / 1e3);
  out += "\n";
  out += prefix + printed("%9s %7s %8s  %-8s %s\n", ("ms/" + per_name.substr(0, 5)).c_str(), "share",
                          ("n/" + per_name.substr(0, 5)).c_str(), "kind", "name");
  for (const char* kind : kKinds) {
    if (s.gpu && !std::strcmp(kind, "work")) continue;   // the kernels themselves are counted
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
