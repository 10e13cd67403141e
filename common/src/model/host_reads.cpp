#include "mlip/model/host_reads.h"

#include <ATen/record_function.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <vector>

#include "mlip/error.h"

namespace mlip {

namespace {

// ATen's operators whose CUDA kernels read device values back to the host (the size of their
// output, a number, a verdict). Those built on them (item() on _local_scalar_dense, a boolean index
// on nonzero, repeat_interleave without output_size on item) are seen through them.
constexpr std::array<std::string_view, 13> kHostReads = {
    "aten::_local_scalar_dense", "aten::item",          "aten::is_nonzero",  "aten::equal",
    "aten::nonzero",             "aten::argwhere",      "aten::masked_select", "aten::_unique",
    "aten::_unique2",            "aten::unique_dim",    "aten::unique_consecutive",
    "aten::unique_dim_consecutive", "aten::_linalg_check_errors"};

// Operators whose CPU kernels read values back where their CUDA kernels do not (what they read
// inside is not counted): the fused Adam takes its step counts and learning-rate tensor as numbers
// on the CPU (on CUDA its kernel reads them on the device); one_hot with num_classes given checks
// its classes on the host only off CUDA (on CUDA a device assert does; without num_classes it
// reads their largest back on any device).
constexpr std::array<std::string_view, 2> kCpuOnlyReads = {"aten::_fused_adam_", "aten::_fused_adamw_"};

bool cpu_only_read(const at::RecordFunction& fn) {
  const std::string_view name = fn.name();
  if (name == "aten::one_hot") {
    const auto in = fn.inputs();
    return in.size() == 2 && in[1].isInt() && in[1].toInt() != -1;
  }
  return std::find(kCpuOnlyReads.begin(), kCpuOnlyReads.end(), name) != kCpuOnlyReads.end();
}

bool reads_host(std::string_view name) {
  return std::find(kHostReads.begin(), kHostReads.end(), name) != kHostReads.end();
}

}  // namespace

struct RecordableScope::Watch {
  const char* what;
  std::vector<std::string> running;   // the operators and functions open now, outermost first
  std::vector<int> cpu_only_at;       // 1 where that one reads back on the CPU only (cpu_only_read)
  int cpu_only = 0;                   // how many of them are open
  std::string first;                  // the first host read, with what it ran inside
  at::CallbackHandle handle = 0;
};

namespace {

thread_local RecordableScope::Watch* current = nullptr;

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  RecordableScope::Watch* w = current;
  if (w == nullptr) return nullptr;
  const std::string_view name = fn.name();
  if (w->first.empty() && fn.scope() == at::RecordScope::FUNCTION && reads_host(name) && w->cpu_only == 0) {
    for (const std::string& outer : w->running) w->first += outer + " > ";
    w->first += name;
  }
  w->running.emplace_back(name);
  w->cpu_only_at.push_back(fn.scope() == at::RecordScope::FUNCTION && cpu_only_read(fn));
  w->cpu_only += w->cpu_only_at.back();
  return nullptr;
}

void on_end(const at::RecordFunction& /*fn*/, at::ObserverContext* /*ctx*/) {
  RecordableScope::Watch* w = current;
  if (w == nullptr || w->running.empty()) return;
  w->running.pop_back();
  w->cpu_only -= w->cpu_only_at.back();
  w->cpu_only_at.pop_back();
}

}  // namespace

bool recordable_checks_on() {
  static const bool on = [] {
    const char* v = std::getenv("MLIP_CHECK_RECORDABLE");
    return v != nullptr && std::strcmp(v, "1") == 0;
  }();
  return on;
}

RecordableScope::RecordableScope(const char* what) {
  if (!recordable_checks_on() || current != nullptr) return;
  watch_ = std::make_unique<Watch>();
  watch_->what = what;
  // TorchScript's functions and autograd's backward nodes too, as context of an operator's name
  watch_->handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(on_start, on_end)
          .needsInputs(true)   // one_hot's num_classes
          .scopes({at::RecordScope::FUNCTION, at::RecordScope::BACKWARD_FUNCTION,
                   at::RecordScope::TORCHSCRIPT_FUNCTION, at::RecordScope::USER_SCOPE}));
  current = watch_.get();
}

RecordableScope::~RecordableScope() { stop(); }

void RecordableScope::stop() noexcept {
  if (!watch_) return;
  at::removeCallback(watch_->handle);
  current = nullptr;
  watch_.reset();
}

void RecordableScope::done() {
  if (!watch_) return;
  const std::string first = watch_->first, what = watch_->what;
  stop();
  if (!first.empty())
    throw Error(what + " reads a device value back to the host (" + first +
                "), which waits for the GPU: a CUDA graph cannot record it (MLIP_CHECK_RECORDABLE=1; a defect of mlip)");
}

}  // namespace mlip
