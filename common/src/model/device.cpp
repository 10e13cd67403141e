#include "mlip/model/device.h"

#include <dlfcn.h>

#include <ATen/Context.h>
#include <ATen/Parallel.h>
#include <ATen/detail/CUDAHooksInterface.h>
#include <torch/cuda.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <typeinfo>

#include "mlip/error.h"

namespace mlip {
namespace {

// The directory of the libtorch_cpu.so this process runs (found from one of its functions).
std::string torch_library_dir() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&at::get_num_threads), &info) == 0 || info.dli_fname == nullptr) return "";
  return std::filesystem::path(info.dli_fname).parent_path().string();
}

std::string visible_devices_note() {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  return v ? std::string(" (CUDA_VISIBLE_DEVICES=") + v + ")" : std::string();
}

std::atomic<bool> cpu_model_loaded{false};

// libcuda.so.1, initialised, or nullptr (`why` set).
void* driver(std::string* why) {
  static std::string failed;
  static void* const lib = [] {
    void* l = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (l == nullptr) {
      failed = "no NVIDIA driver (libcuda.so.1 cannot be loaded)";
      return static_cast<void*>(nullptr);
    }
    using Init = int (*)(unsigned);
    const auto init = reinterpret_cast<Init>(dlsym(l, "cuInit"));
    if (init == nullptr) {
      failed = "libcuda.so.1 lacks cuInit";
      return static_cast<void*>(nullptr);
    }
    if (const int rc = init(0); rc != 0) {
      failed = "the NVIDIA driver's cuInit failed with CUDA error " + std::to_string(rc) +
               (rc == 100 ? " (no CUDA-capable device)" : "");
      return static_cast<void*>(nullptr);
    }
    return l;
  }();
  if (lib == nullptr) *why = failed;
  return lib;
}

// GPUs the NVIDIA driver sees (CUDA_VISIBLE_DEVICES applies), asked through the driver library
// itself, so that "auto" on a machine without a GPU costs nothing (LibTorch's CUDA backend costs
// ~350 MB of resident memory once loaded). -1 and `why` set when there is no usable driver.
int driver_gpu_count(std::string* why) {
  void* lib = driver(why);
  if (lib == nullptr) return -1;
  using Count = int (*)(int*);
  const auto count = reinterpret_cast<Count>(dlsym(lib, "cuDeviceGetCount"));
  int n = 0;
  if (count == nullptr) {
    *why = "libcuda.so.1 lacks cuDeviceGetCount";
    return -1;
  }
  if (count(&n) != 0 || n == 0) {
    *why = "the NVIDIA driver sees no GPU";
    return 0;
  }
  return n;
}

}  // namespace

std::string gpu_bus_id(int index) {
  std::string why;
  void* lib = driver(&why);
  if (lib == nullptr) return "";
  using Get = int (*)(int*, int);
  using Bus = int (*)(char*, int, int);
  const auto get = reinterpret_cast<Get>(dlsym(lib, "cuDeviceGet"));
  const auto bus = reinterpret_cast<Bus>(dlsym(lib, "cuDeviceGetPCIBusId"));
  int device = 0;
  char id[32] = {0};
  if (get == nullptr || bus == nullptr || get(&device, index) != 0 || bus(id, sizeof(id), device) != 0) return "";
  return id;
}

void set_deterministic(bool on) {
  if (on) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/true);
}

void note_model_loaded_on_cpu() { cpu_model_loaded = true; }

std::string load_cuda_backend() {
  static const std::string status = [] {
    const std::string dir = torch_library_dir();
    if (dir.empty()) return std::string("cannot locate libtorch_cpu.so (dladdr failed)");
    const std::string lib = (std::filesystem::path(dir) / "libtorch_cuda.so").string();
    if (!std::filesystem::exists(lib)) {
      return "the LibTorch in " + dir + " has no CUDA backend (no libtorch_cuda.so): a CPU-only build";
    }
    const bool linked = dlopen(lib.c_str(), RTLD_NOW | RTLD_NOLOAD) != nullptr;
    if (!linked && cpu_model_loaded) {
      // LibTorch (autograd's device threads, ATen's CUDA hooks) counts its devices once, at first use.
      return std::string("LibTorch's CUDA backend must be loaded before the process's first model runs on the "
                         "CPU: choose the GPU in the first model of the process (the first pair_style mlip)");
    }
    // RTLD_GLOBAL: its operators and hooks register with the ATen already loaded.
    if (dlopen(lib.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
      const char* why = dlerror();
      return lib + ": cannot be loaded: " + (why ? why : "unknown error");
    }
    // ATen takes its CUDA hooks from the registry once; had it looked before, it keeps the
    // placeholder (the interface class itself) for good.
    const at::CUDAHooksInterface& hooks = at::detail::getCUDAHooks();
    if (typeid(hooks) == typeid(at::CUDAHooksInterface)) {
      return std::string("LibTorch had settled on having no CUDA backend before it was loaded (something asked "
                         "about CUDA first, e.g. at::show_config()): choose the device first thing");
    }
    return std::string();
  }();
  return status;
}

int cuda_device_count() {
  std::string why;
  if (driver_gpu_count(&why) <= 0 || !load_cuda_backend().empty()) return 0;
  return static_cast<int>(torch::cuda::device_count());
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) at::detail::getCUDAHooks().deviceSynchronize(device.has_index() ? device.index() : 0);
}

torch::Device choose_device(const std::string& spec, int local_rank, const std::string& where, std::string* note) {
  auto say = [&](const std::string& s) {
    if (note) *note = s;
  };
  if (spec == "cpu") {
    say("CPU (as asked)");
    return torch::kCPU;
  }
  int index = -1;
  if (spec.rfind("cuda:", 0) == 0) {
    const std::string digits = spec.substr(5);
    if (digits.empty() || digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 4) {
      throw Error(where + ": device '" + spec + "': expected cuda:N with N a GPU index");
    }
    index = std::stoi(digits);
  } else if (spec != "cuda" && spec != "auto") {
    throw Error(where + ": unknown device '" + spec + "' (known: cpu, cuda, cuda:N, auto)");
  }
  std::string why;
  int count = driver_gpu_count(&why) > 0 ? -1 : 0;   // -1: ask LibTorch
  if (count < 0) {
    why = load_cuda_backend();
    count = why.empty() ? static_cast<int>(torch::cuda::device_count()) : 0;
    if (why.empty() && count == 0) why = "LibTorch's CUDA backend sees no GPU";
  }
  if (count == 0) {
    why += visible_devices_note();
    if (spec == "auto") {
      say("CPU (device auto: " + why + ")");
      return torch::kCPU;
    }
    throw Error(where + ": device '" + spec + "' asked for, but no GPU can be used: " + why);
  }
  if (index >= count) {
    throw Error(where + ": device '" + spec + "': only " + std::to_string(count) + " GPU(s) visible" +
                visible_devices_note());
  }
  if (index < 0) index = (local_rank < 0 ? 0 : local_rank) % count;
  say("GPU cuda:" + std::to_string(index) + " of " + std::to_string(count) + " visible" + visible_devices_note() +
      (spec == "cuda:" + std::to_string(index) ? "" : ", node-local rank " + std::to_string(local_rank)));
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

}  // namespace mlip
