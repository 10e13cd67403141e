// The NCCL backend: gradient all-reduces of a GPU run on the device, on LibTorch's current CUDA
// stream (so they are ordered after the backward pass that produced the gradients without a
// host synchronisation). Everything else (metrics, broadcasts, barriers) goes to the host
// communicator, which also carries NCCL's unique id from rank 0 to the others.
//
// Built only where CMake found NCCL and LibTorch's CUDA libraries (MLIP_NCCL); elsewhere the
// factory says so.
#include "communicator.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <vector>

#include "mlip/error.h"
#include "watchdog.h"

#ifdef MLIP_HAVE_NCCL
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <nccl.h>
#endif

namespace mlip::trainer {

#ifdef MLIP_HAVE_NCCL
namespace {

class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(Communicator& host, const torch::Device& device, double timeout_s) : host_(host), device_(device) {
    if (!device.is_cuda()) fail("ncclCommInitRank", "the training device is " + device.str() + ", not a GPU");
    std::string id(sizeof(ncclUniqueId), '\0');
    if (host.is_root()) {
      ncclUniqueId uid;
      check(ncclGetUniqueId(&uid), "ncclGetUniqueId");
      id.assign(reinterpret_cast<const char*>(&uid), sizeof(uid));
    }
    host.broadcast(id);
    if (id.size() != sizeof(ncclUniqueId)) fail("ncclCommInitRank", "received a unique id of the wrong size");
    ncclUniqueId uid;
    std::memcpy(&uid, id.data(), sizeof(uid));
    const c10::cuda::CUDAGuard guard(device.index());
    // No buffer registration when a step is recorded: registering a recorded all-reduce's buffers
    // (NVLS, CollNet) waits for every rank of the node at recording time. The ranks record anew
    // together (the trainer agrees on one capacity before each step), but a rank recording while
    // the others replay would hang, and registration has never run here with several GPUs.
    setenv("NCCL_GRAPH_REGISTER", "0", /*overwrite=*/0);
    check(ncclCommInitRank(&comm_, host.size(), uid, host.rank()), "ncclCommInitRank");
    const int index = device.index();
    watchdog_ = std::make_unique<CollectiveWatchdog>(
        [this] { return async_error(); }, [this](const std::string& why) { end_job(why); },
        std::chrono::milliseconds(static_cast<int64_t>(std::ceil(timeout_s * 1000))), std::chrono::seconds(1),
        [index] { cudaSetDevice(index); });   // the poller's CUDA calls on this rank's GPU, not GPU 0
  }
  // Unwinding (this rank failed; a run of several ranks ends the job before, main.cpp):
  // ncclCommAbort, which returns at once. ncclCommDestroy would first wait for this rank's
  // enqueued all-reduces, whose peers may never come.
  ~NcclCommunicator() override {
    watchdog_.reset();
    if (comm_ == nullptr) return;
    if (std::uncaught_exceptions() > 0)
      ncclCommAbort(comm_);
    else
      ncclCommDestroy(comm_);
  }
  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  int local_rank() const override { return host_.local_rank(); }
  int local_size() const override { return host_.local_size(); }
  std::string name() const override { return "nccl"; }
  void allreduce_sum(torch::Tensor& t) override {
    if (!t.is_cuda() || t.device() != device_) {
      fail("ncclAllReduce", "tensor on " + t.device().str() + ", expected " + device_.str());
    }
    if (!t.is_contiguous()) fail("ncclAllReduce", "non-contiguous tensor");
    ncclDataType_t type = ncclFloat64;
    if (t.scalar_type() == torch::kFloat32) {
      type = ncclFloat32;
    } else if (t.scalar_type() != torch::kFloat64) {
      fail("ncclAllReduce", std::string("a ") + c10::toString(t.scalar_type()) + " tensor (float32/float64 only)");
    }
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
    check(ncclAllReduce(t.data_ptr(), t.data_ptr(), static_cast<size_t>(t.numel()), type, ncclSum, comm_, stream),
          "ncclAllReduce");
  }
  // The stream's work so far watched for communication.timeout, through an event after it (not
  // inside a recording: the caller watches its replays). One event for a step's all-reduces:
  // the callers watch after the last (GradientReducer::reduce, Trainer::take_step).
  // Every CUDA error here is cleared (cudaGetLastError), so that LibTorch's next launch check
  // does not meet it.
  void watch_enqueued(const char* what) override {
    const c10::cuda::CUDAGuard guard(device_.index());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(device_.index()).stream();
    cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream, &capturing) != cudaSuccess) {
      cudaGetLastError();
      return;
    }
    if (capturing != cudaStreamCaptureStatusNone) return;
    cudaEvent_t raw = nullptr;
    if (cudaEventCreateWithFlags(&raw, cudaEventDisableTiming) != cudaSuccess)
      fail("cudaEventCreate", cudaGetErrorString(cudaGetLastError()));
    const std::shared_ptr<CUevent_st> event(raw, [](cudaEvent_t e) { cudaEventDestroy(e); });
    if (cudaEventRecord(raw, stream) != cudaSuccess) fail("cudaEventRecord", cudaGetErrorString(cudaGetLastError()));
    // Asked on the watchdog's poller thread only. A failed query (the device in error) counts as
    // done: the main thread meets that error.
    watchdog_->watch(what, [event] {
      const cudaError_t rc = cudaEventQuery(event.get());
      if (rc != cudaSuccess) cudaGetLastError();
      return rc != cudaErrorNotReady;
    });
  }
  std::string unrecordable() const override {
    int version = 0;
    if (ncclGetVersion(&version) != ncclSuccess) return "ncclGetVersion failed";
    return nccl_unrecordable(version);
  }
  void allreduce_sum(double* data, std::size_t n) override { host_.allreduce_sum(data, n); }
  void allreduce_sum(float* data, std::size_t n) override { host_.allreduce_sum(data, n); }
  void broadcast(std::string& bytes) override { host_.broadcast(bytes); }
  void barrier() override { host_.barrier(); }

 private:
  [[noreturn]] void fail(const char* call, const std::string& why) const {
    throw Error("rank " + std::to_string(host_.rank()) + ": " + call + " failed: " + why);
  }
  // NCCL's asynchronous error (a peer or the network failed), or empty.
  std::string async_error() const {
    ncclResult_t state = ncclSuccess;
    if (ncclCommGetAsyncError(comm_, &state) != ncclSuccess) return "ncclCommGetAsyncError failed";
    if (state == ncclSuccess || state == ncclInProgress) return {};
    std::string why = std::string("NCCL reported an error: ") + ncclGetErrorString(state);
    const char* last = ncclGetLastError(comm_);
    if (last && *last) why += std::string(" (") + last + ")";
    return why;
  }
  // From the watchdog's thread: the main thread may be blocked in a wait that only the peers
  // could end, so this process ends here. Not by MPI_Abort: MPI runs single-threaded
  // (MPI_Init), and this is another thread. The launcher ends the job when a rank exits with an
  // error (mpirun does; under srun, the other ranks' watchdogs find their peer gone).
  [[noreturn]] void end_job(const std::string& why) {
    std::fprintf(stderr, "mlip-trainer: rank %d: %s; ending this rank\n", host_.rank(), why.c_str());
    std::fflush(nullptr);
    std::_Exit(1);
  }
  void check(ncclResult_t rc, const char* call) const {
    if (rc == ncclSuccess) return;
    std::string why = ncclGetErrorString(rc);
    const char* last = ncclGetLastError(comm_);   // also before a communicator exists (nullptr)
    if (last && *last) why += std::string(" (") + last + ")";
    fail(call, why);
  }

  Communicator& host_;
  torch::Device device_;
  ncclComm_t comm_ = nullptr;
  std::unique_ptr<CollectiveWatchdog> watchdog_;   // after comm_, which it polls
};

std::string pci_bus_id(const torch::Device& device) {
  char id[32] = {0};
  if (cudaDeviceGetPCIBusId(id, sizeof(id), device.index()) != cudaSuccess) {
    cudaGetLastError();
    return device.str();
  }
  return id;
}

}  // namespace

bool nccl_available() { return true; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, const torch::Device& device, double timeout_s) {
  return std::make_unique<NcclCommunicator>(host, device, timeout_s);
}

#else

namespace {
std::string pci_bus_id(const torch::Device& device) { return device.str(); }
}  // namespace

bool nccl_available() { return false; }

std::unique_ptr<Communicator> make_nccl_communicator(Communicator& host, const torch::Device&, double) {
  throw Error("rank " + std::to_string(host.rank()) +
              ": communication.backend nccl: this mlip-trainer was built without NCCL (MLIP_NCCL=OFF: CMake found "
              "no NCCL or no CUDA build of LibTorch)");
}

#endif

std::string gpu_identity(const torch::Device& device) {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return std::string(host) + "/" + pci_bus_id(device);
}

GpuSharing gpu_sharing(Communicator& comm, const std::string& identity) {
  // Each rank's identity as a number exact in a double (52 bits of its hash, + 1: 0 is the CPU).
  const double mine =
      identity.empty() ? 0.0 : static_cast<double>(std::hash<std::string>{}(identity) & ((uint64_t{1} << 52) - 1)) + 1.0;
  std::vector<double> ids = gather_rows(comm, {mine});
  const int with_mine = mine == 0.0 ? 1 : static_cast<int>(std::count(ids.begin(), ids.end(), mine));
  ids.erase(std::remove(ids.begin(), ids.end(), 0.0), ids.end());
  std::sort(ids.begin(), ids.end());
  return {static_cast<int>(ids.size()), std::adjacent_find(ids.begin(), ids.end()) == ids.end(), with_mine};
}

}  // namespace mlip::trainer
