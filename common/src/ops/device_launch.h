// Where an operator's work runs (mlip/ops/operators.h's KernelChoice) and the runner of the device
// kernels (device_kernels.h): on a GPU through libmlip_cuda_ops.so, loaded on first use; on the CPU
// as a loop over the same functors (what ctest runs).
#pragma once

#include <atomic>
#include <string>
#include <type_traits>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/types.h>

#include "cpu_kernels.h"
#include "device_kernels.h"
#include "mlip/ops/operators.h"

namespace mlip::detail {

enum class KernelPath { cpu_kernels, device_kernels, aten };

/// The path for operands on `device` under the current KernelChoice. On a GPU without
/// libmlip_cuda_ops.so (a build without CUDA, or the library not found) the usual choice is the
/// aten formulations, said once on stderr.
KernelPath kernel_path(const torch::Device& device);
/// The same for an operator whose device kernels have no tables (no sort of the edges): a CUDA
/// graph's recording keeps them (kernel_path takes the ATen formulations while one is recorded).
KernelPath kernel_path_without_tables(const torch::Device& device);

/// libmlip_cuda_ops.so's launcher, or an error that says why it cannot be had.
kernels::CudaLaunch cuda_launcher();
const char* cuda_launch_error();
/// Why the CUDA library at `path` would be refused (not found, another version or functor
/// layout), or empty; it is not kept.
std::string cuda_library_refused(const std::string& path);
/// Another function of libmlip_cuda_ops.so's C interface (device_kernels.h), or nullptr where the
/// library cannot be had.
void* cuda_symbol(const char* name);

// The CPU's loop over a functor's elements [i0, i1), built per ISA (cpu_kernels.h's MLIP_CLONES:
// GCC picks at load time). The functor is copied to a local, so that its stores cannot change its
// own pointers and the loop vectorises (in a file built with -fno-trapping-math, where the
// kernels' selects may be evaluated on every lane).
template <class F> MLIP_CLONES void host_elements(const F& shared, int64_t i0, int64_t i1) {
  const F f = shared;
  for (int64_t i = i0; i < i1; ++i) f(i);
}

/// Tests only: the CPU's loop runs elements from the last to the first, one thread (while a
/// ReversedElements lives). A GPU runs a kernel's elements in any order and at once: a kernel whose
/// result depends on that order (an element reading what another writes in the same launch, two
/// writing one place) then gives another result on the CPU too.
inline std::atomic<bool> host_elements_reversed{false};
struct ReversedElements {
  ReversedElements() : before_(host_elements_reversed.exchange(true)) {}
  ~ReversedElements() { host_elements_reversed = before_; }
  ReversedElements(const ReversedElements&) = delete;
  ReversedElements& operator=(const ReversedElements&) = delete;

 private:
  bool before_;
};

/// Runs elements [0, count) of functor f on `device`.
template <class F> void run_elements(const F& f, int64_t count, const torch::Device& device) {
  if (count == 0) return;
  if (device.is_cpu()) {
    if (host_elements_reversed.load(std::memory_order_relaxed)) {
      for (int64_t i = count; i-- > 0;) host_elements(f, i, i + 1);   // the same ISA's code as in order
      return;
    }
    at::parallel_for(0, count, 2048, [&](int64_t i0, int64_t i1) { host_elements(f, i0, i1); });
    return;
  }
  TORCH_CHECK(device.is_cuda(), "mlip's kernel ", kernels::kernel_name(F::id), " runs on the CPU or a CUDA GPU, not on ",
              device.str());
  const bool f64 = std::is_same_v<typename decltype(f.o)::value_type, double>;
  const int rc = cuda_launcher()(int(F::id), f64, &f, count, device.index());
  TORCH_CHECK(rc == 0, "mlip's CUDA kernel ", kernels::kernel_name(F::id), ": ", cuda_launch_error());
}

/// The edges (or nodes, slots) grouped by `index` in [0, count), each group in their order:
/// (order, first) with the members of group v at order[first[v] .. first[v + 1]). Aten operations,
/// on index's device.
std::pair<torch::Tensor, torch::Tensor> grouped_by(const torch::Tensor& index, int64_t count);

}  // namespace mlip::detail
