// mlip's LibTorch operators (torch.ops.mlip.*), which models call: tanh_net (mlip/ops/radial_net.h),
// edge_outer_sum and its family (mlip/ops/edge_contraction.h), tabulated_contraction
// (mlip/ops/tabulated_embedding.h), se_environment (mlip/ops/se_environment.h), vector_message and
// equivariant_message (the message sums of PaiNN and MACE). They register themselves when their object files are linked in;
// anything that loads or builds a model through plain torch::jit calls link_operators() once so
// that a static link keeps them. Python: torch.ops.load_library("<build>/lib/libmlip_ops.so").
#pragma once

#include <atomic>
#include <string>

#include <c10/core/Device.h>

namespace mlip {

void link_operators();

namespace detail {
inline std::atomic<int> kernel_choice_set{-1};  // -1: the environment's (MLIP_KERNELS)
// Raised where indices are trusted, and while a CUDA graph is recorded (mlip/model/graph_capture.h);
// any thread (autograd's too).
inline std::atomic<int> device_value_checks_paused{0};
// Raised while a CUDA graph is recorded; any thread.
inline std::atomic<int> device_work_recorded{0};
// Raised on this thread inside an operator's autograd backward: its operands are those its forward
// checked.
inline thread_local int operands_checked_by_forward = 0;
}  // namespace detail

/// The operators check index bounds and the compressed table's range by reading values back from
/// the device, a device-to-host copy that a CUDA graph cannot record. While one is recorded these
/// checks are off: the grouped graph's host-side builder checks the indices, finite edge vectors
/// and the compressed table's shortest distance instead (mlip/model/grouped_graph.h). Shape, dtype and device checks always run.
inline bool device_value_checks_on() { return detail::device_value_checks_paused.load() == 0; }
/// The same for the checks of operands an operator's forward has checked (indices, a table's
/// range): also off inside the operators' autograd backwards, whose operands are the forward's
/// (a direct call of a backward operator checks them).
inline bool device_operand_checks_on() {
  return device_value_checks_on() && detail::operands_checked_by_forward == 0;
}

class DeviceValueChecksPaused {
 public:
  DeviceValueChecksPaused() { ++detail::device_value_checks_paused; }
  ~DeviceValueChecksPaused() { --detail::device_value_checks_paused; }
  DeviceValueChecksPaused(const DeviceValueChecksPaused&) = delete;
  DeviceValueChecksPaused& operator=(const DeviceValueChecksPaused&) = delete;
};

/// While a CUDA graph is recorded: the value checks paused, and the operators on the formulations
/// a recording has been checked with (detail::kernel_path).
class DeviceWorkRecorded {
 public:
  DeviceWorkRecorded() { ++detail::device_work_recorded; }
  ~DeviceWorkRecorded() { --detail::device_work_recorded; }
  DeviceWorkRecorded(const DeviceWorkRecorded&) = delete;
  DeviceWorkRecorded& operator=(const DeviceWorkRecorded&) = delete;

 private:
  DeviceValueChecksPaused paused_;
};

/// Inside an operator's autograd backward (this thread): its forward checked the operands.
class OperandsCheckedByForward {
 public:
  OperandsCheckedByForward() { ++detail::operands_checked_by_forward; }
  ~OperandsCheckedByForward() { --detail::operands_checked_by_forward; }
  OperandsCheckedByForward(const OperandsCheckedByForward&) = delete;
  OperandsCheckedByForward& operator=(const OperandsCheckedByForward&) = delete;
};

/// Where equivariant_message and symmetric_contraction run their work:
///   usual          - the CPU kernels on the CPU; on a GPU the device kernels (libmlip_cuda_ops.so),
///                    or the aten formulations where that library cannot be loaded (said once)
///   device_kernels - the device kernels on any device (on the CPU a loop over the same per-element
///                    code: how ctest checks the GPU's logic)
///   aten           - the aten formulations on any device (the reference; benchmarks compare)
/// The environment's MLIP_KERNELS=usual|device|aten sets it for a process; a scope for a while.
enum class KernelChoice { usual = 0, device_kernels = 1, aten = 2 };
KernelChoice kernel_choice();

class KernelChoiceScope {
 public:
  explicit KernelChoiceScope(KernelChoice choice);
  ~KernelChoiceScope();
  KernelChoiceScope(const KernelChoiceScope&) = delete;
  KernelChoiceScope& operator=(const KernelChoiceScope&) = delete;

 private:
  int before_;
};

/// Empty if the device kernels can run on a GPU, else why not (libmlip_cuda_ops.so missing or of
/// another version).
std::string device_kernels_unavailable();
/// The same for `device`: also whether the library has code for that GPU's architecture (asked
/// once per GPU); empty for the CPU.
std::string device_kernels_unavailable(const c10::Device& device);

}  // namespace mlip
