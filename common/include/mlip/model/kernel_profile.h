// Where a stretch of work spends its time, by LibTorch's profiler (Kineto): on a GPU each kernel's
// time, the copies, and the host's kernel launches and waits for the device; on the host the
// operators' self time. The pair style's `timing kernels` and `mlip-trainer train --profile N`
// print its table: the kernels' own times next to the wall time say whether a step is bound by the
// GPU's work or by the host (launches, waits, graph building), which no wall-clock split can.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

namespace mlip {

struct ProfileRow {
  std::string kind;   // "kernel", "copy", "memset" (the GPU's work), "runtime" (host calls into
                      // CUDA), "operator" (host, self time: the time not inside another event),
                      // "work" (the operators doing work: see work_operators)
  std::string name;
  int64_t calls = 0;
  double seconds = 0;
};

struct ProfileSummary {
  std::vector<ProfileRow> rows;   // by kind in the order above, then by time, longest first
  double wall_seconds = 0;        // from start to stop
  double gpu_seconds = 0;         // kernels, copies and memsets, summed
  int64_t kernels = 0;            // kernels run on the GPU
  int64_t launches = 0;           // host calls that launch a kernel
  int64_t waits = 0;              // host calls that wait for the GPU (synchronisations)
  double wait_seconds = 0;
  // Host operators that do work themselves: those with no operator inside them, less views and
  // allocations, and ATen's foreach and fused operators once each (one launch on a GPU, a loop on
  // the CPU). On the CPU, running the operators' GPU formulations (MLIP_KERNELS=aten), it
  // estimates the kernels a GPU would run (cuBLAS and ATen may launch more than one per operator).
  int64_t work_operators = 0;
  bool gpu = false;               // a GPU was profiled (its activity asked for)
  double seconds(const std::string& kind) const;   // the rows of one kind, summed
};

/// Starts LibTorch's profiler (CPU operators; where `device` is a GPU, its activity too); stop()
/// ends it. One at a time in a process (LibTorch's profiler is one): a second one is an error. On a
/// GPU the device is synchronised at start and stop, so that the wall time holds the work in between
/// (stop()'s wait, the profile's last host event, is not counted among the host's waits).
class KernelProfile {
 public:
  explicit KernelProfile(const torch::Device& device);
  ~KernelProfile();   // stops it if stop() was not called
  KernelProfile(const KernelProfile&) = delete;
  KernelProfile& operator=(const KernelProfile&) = delete;

  ProfileSummary stop();
  bool running() const { return running_; }

 private:
  bool running_ = false;
  torch::Device device_;
  std::chrono::steady_clock::time_point start_;
};

/// The summary as text lines, each starting with `prefix`: totals and, per kind, the `top` rows
/// with the most time; times and counts per `per` (e.g. force calls), which `per_name` names.
std::string format_profile(const ProfileSummary& s, const std::string& prefix, double per,
                           const std::string& per_name, int top = 12);

}  // namespace mlip
