// Where models run: the CPU or one of the rank's GPUs, chosen the same way by the trainer
// (training.device) and the pair style (pair_style mlip ... device D).
//
// mlip links LibTorch's CPU libraries only (cmake/MlipTorch.cmake: the CUDA ones cost every
// process ~330 MB of resident memory). A GPU run loads LibTorch's CUDA backend,
// libtorch_cuda.so from the directory of the libtorch_cpu.so in use, when a device is chosen:
// choose_device() must therefore come before any other LibTorch call of the process that asks
// about CUDA (ATen decides once per process whether it has a CUDA backend; at::show_config() and
// mlip::cpu_capability() ask).
#pragma once

#include <string>

#include <torch/types.h>

namespace mlip {

/// Loads libtorch_cuda.so beside the libtorch_cpu.so in use (a no-op if it is loaded). Returns
/// an empty string on success, else why not (a CPU-only LibTorch, a missing library, ...).
std::string load_cuda_backend();

/// Called by Model::load for a model on the CPU: after that, LibTorch may have counted its
/// devices, and load_cuda_backend() refuses (with a message saying why) rather than half-work.
void note_model_loaded_on_cpu();

/// GPUs LibTorch sees (CUDA_VISIBLE_DEVICES applies); 0 without a driver, a GPU or a CUDA
/// backend (the backend is loaded only where the driver sees a GPU).
int cuda_device_count();

/// Waits for the work queued on `device` (a GPU; nothing to wait for on the CPU): host clocks
/// around asynchronous GPU work measure it only after this.
void synchronize(const torch::Device& device);

/// Turns LibTorch's deterministic GPU kernels on or off for the whole process (training.deterministic,
/// pair_style mlip ... deterministic yes): index_add and its kin sum through a sort instead of atomics,
/// and cuBLAS gets a fixed workspace (CUBLAS_WORKSPACE_CONFIG, unless the environment sets it; read
/// when a cuBLAS handle is made, so this comes before the first GPU matrix product). Ops without a
/// deterministic kernel warn rather than fail. The CPU's kernels are deterministic either way.
void set_deterministic(bool on);

/// The PCI bus id of visible GPU `index` ("0000:1A:00.0": the same GPU under any
/// CUDA_VISIBLE_DEVICES), asked of the NVIDIA driver; "" where it cannot be read.
std::string gpu_bus_id(int index);

/// The device named by `spec`:
///   "cpu"
///   "cuda"     the GPU with index local_rank % (visible GPUs): one GPU per rank of a node when
///              there are as many ranks as GPUs (local_rank: the rank among the job's ranks on
///              this node, see node_local_rank() in the trainer and the pair style)
///   "cuda:N"   GPU N of the visible ones
///   "auto"     "cuda" when a GPU is visible, else "cpu" (asked of the NVIDIA driver first, so
///              that a machine without one never loads LibTorch's CUDA backend)
/// Throws mlip::Error naming `where` (e.g. "pair_style mlip", "training.device") and the cause
/// when the spec is unknown or no GPU can be used. `note`, if given, gets one line saying what
/// was chosen and why (for logs).
torch::Device choose_device(const std::string& spec, int local_rank, const std::string& where,
                            std::string* note = nullptr);

}  // namespace mlip
