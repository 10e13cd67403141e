// mlip's LibTorch operators (torch.ops.mlip.*), which models call: tanh_net (mlip/ops/radial_net.h),
// edge_outer_sum and its family (mlip/ops/edge_contraction.h), tabulated_contraction
// (mlip/ops/tabulated_embedding.h), vector_message and equivariant_message (the message sums of
// PaiNN and MACE). They register themselves when their object files are linked in;
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
// Raised while a CUDA graph is recorded (mlip/model/graph_capture.h); any thread (autograd's too).
inline std::atomic<int> device_value_checks_paused{0};
}  // namespace detail

/// The operators check index bounds and the compressed table's range by reading values back from
/// the device, a device-to-host copy that a CUDA graph cannot record. While one is recorded these
/// checks are off: the grouped graph's host-side builder checks the indices, finite edge vectors
/// and the compressed table's shortest distance instead (mlip/model/grouped_graph.h). Shape, dtype and device checks always run.
inline bool device_value_checks_on() { return detail::device_value_checks_paused.load() == 0; }

class DeviceValueChecksPaused {
 public:
  DeviceValueChecksPaused() { ++detail::device_value_checks_paused; }
  ~DeviceValueChecksPaused() { --detail::device_value_checks_paused; }
  DeviceValueChecksPaused(const DeviceValueChecksPaused&) = delete;
  DeviceValueChecksPaused& operator=(const DeviceValueChecksPaused&) = delete;
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
