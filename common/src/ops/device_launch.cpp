#include "device_launch.h"
#include "kernel_layout.h"

#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <string>

namespace mlip {

namespace {

KernelChoice choice_from_environment() {
  const char* env = std::getenv("MLIP_KERNELS");
  if (env == nullptr || *env == '\0' || std::strcmp(env, "usual") == 0) return KernelChoice::usual;
  if (std::strcmp(env, "device") == 0) return KernelChoice::device_kernels;
  if (std::strcmp(env, "aten") == 0) return KernelChoice::aten;
  TORCH_CHECK(false, "MLIP_KERNELS=", env, ": expected usual, device or aten");
}

std::string cuda_library_path() {
  if (const char* env = std::getenv("MLIP_CUDA_OPS_LIBRARY"); env != nullptr && *env) return env;
#ifdef MLIP_CUDA_OPS_LIBRARY
  return MLIP_CUDA_OPS_LIBRARY;   // where this build put it
#else
  return "";
#endif
}

// The library's launcher, or nullptr with the reason in `why`; loaded once, kept for the process.
struct CudaLibrary {
  kernels::CudaLaunch launch = nullptr;
  kernels::CudaError error = nullptr;
  kernels::CudaRunsOn runs_on = nullptr;
  void* handle = nullptr;
  std::string why;
  explicit CudaLibrary(const std::string& path) {
    if (path.empty()) {
      why = "this mlip was built without libmlip_cuda_ops.so (no CUDA compiler, or LibTorch without CUDA)";
      return;
    }
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char* e = dlerror();
      why = path + " cannot be loaded: " + (e ? e : "unknown error") + " (MLIP_CUDA_OPS_LIBRARY names another)";
      return;
    }
    const auto version = reinterpret_cast<kernels::CudaVersion>(dlsym(lib, "mlip_cuda_version"));
    const auto layout = reinterpret_cast<kernels::CudaLayout>(dlsym(lib, "mlip_cuda_layout"));
    launch = reinterpret_cast<kernels::CudaLaunch>(dlsym(lib, "mlip_cuda_launch"));
    error = reinterpret_cast<kernels::CudaError>(dlsym(lib, "mlip_cuda_error"));
    runs_on = reinterpret_cast<kernels::CudaRunsOn>(dlsym(lib, "mlip_cuda_runs_on"));
    if (version == nullptr || layout == nullptr || launch == nullptr || error == nullptr || runs_on == nullptr ||
        version() != kernels::kDeviceKernelsVersion || layout() != kernels::kernel_layout()) {
      why = path + " is not the CUDA library of this mlip (another version)";
      launch = nullptr, error = nullptr, runs_on = nullptr;
      dlclose(lib);
      return;
    }
    handle = lib;
  }
};

const CudaLibrary& cuda_library() {
  static const CudaLibrary lib(cuda_library_path());
  return lib;
}

}  // namespace

KernelChoice kernel_choice() {
  const int c = detail::kernel_choice_set.load();
  if (c >= 0) return static_cast<KernelChoice>(c);
  static const KernelChoice from_env = choice_from_environment();
  return from_env;
}

KernelChoiceScope::KernelChoiceScope(KernelChoice choice) : before_(detail::kernel_choice_set.load()) {
  detail::kernel_choice_set.store(static_cast<int>(choice));
}
KernelChoiceScope::~KernelChoiceScope() { detail::kernel_choice_set.store(before_); }

std::string device_kernels_unavailable() { return cuda_library().launch ? std::string() : cuda_library().why; }

std::string device_kernels_unavailable(const torch::Device& device) {
  if (!device.is_cuda()) return "";
  const CudaLibrary& lib = cuda_library();
  if (!lib.launch) return lib.why;
  // Asked once per GPU (a CUDA call: never while a graph is recorded, as kernel_path() asks first).
  constexpr int kDevices = 64;
  static std::once_flag asked[kDevices];
  static std::string why[kDevices];
  const int index = device.has_index() ? device.index() : 0;
  if (index < 0 || index >= kDevices) return "";
  std::call_once(asked[index], [&] {
    if (lib.runs_on(index) != 0)
      why[index] = "libmlip_cuda_ops.so's kernels cannot run on cuda:" + std::to_string(index) + ": " + lib.error();
  });
  return why[index];
}

namespace detail {

namespace {
KernelPath path_of(const torch::Device& device, bool tables) {
  switch (kernel_choice()) {
    case KernelChoice::aten:
      return KernelPath::aten;
    case KernelChoice::device_kernels:
      return KernelPath::device_kernels;
    case KernelChoice::usual:
      break;
  }
  if (device.is_cpu()) return KernelPath::cpu_kernels;
  // While a CUDA graph is recorded: the ATen formulations, which the GPU check has recorded and
  // replayed (GraphCapture); the device kernels' tables sort the edges (argsort), not yet recorded
  // on a GPU. DeviceStep asks for the device kernels explicitly (its own cell list sorts too).
  // Value checks paused for trusted indices (grouped training batches) keep the device kernels.
  if (tables && detail::device_work_recorded.load() > 0) return KernelPath::aten;
  const std::string why = device_kernels_unavailable(device);
  if (why.empty()) return KernelPath::device_kernels;
  static std::once_flag said;
  std::call_once(said, [&] {
    std::cerr << "mlip: the operators run their aten formulations on the GPU (more memory, slower): " << why << "\n";
  });
  return KernelPath::aten;
}
}  // namespace

KernelPath kernel_path(const torch::Device& device) { return path_of(device, /*tables=*/true); }
KernelPath kernel_path_without_tables(const torch::Device& device) { return path_of(device, /*tables=*/false); }

std::string cuda_library_refused(const std::string& path) {
  const CudaLibrary lib(path);
  if (lib.handle != nullptr) dlclose(lib.handle);
  return lib.why;
}

kernels::CudaLaunch cuda_launcher() {
  TORCH_CHECK(cuda_library().launch != nullptr, "mlip's CUDA kernels: ", cuda_library().why);
  return cuda_library().launch;
}

void* cuda_symbol(const char* name) {
  return cuda_library().handle != nullptr ? dlsym(cuda_library().handle, name) : nullptr;
}

const char* cuda_launch_error() { return cuda_library().error ? cuda_library().error() : ""; }

std::pair<torch::Tensor, torch::Tensor> grouped_by(const torch::Tensor& index, int64_t count) {
  const torch::Tensor order = torch::argsort(index, /*stable=*/true);
  // Counted by a scatter, not bincount, whose size check reads the device (no CUDA graph could
  // record it).
  const torch::Tensor first =
      torch::zeros({count + 1}, index.options()).scatter_add_(0, index + 1, torch::ones_like(index)).cumsum(0);
  return {order, first};
}

}  // namespace detail
}  // namespace mlip
