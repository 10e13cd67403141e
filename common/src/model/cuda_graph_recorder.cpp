// libmlip_cuda_graph.so: records and replays CUDA graphs with LibTorch's CUDA libraries, behind a
// C interface that mlip/model/graph_capture.h loads with dlopen when a CUDA graph is asked for (mlip
// itself links LibTorch's CPU libraries only: mlip/model/device.h). Every function returns 0 on
// success, else -1 with the reason in mlip_cuda_graph_error().
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/cuda/MemPool.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/util/Exception.h>

#include <exception>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

namespace {

thread_local std::string last_error;

// One recorded call: its graph, and the side stream that warm-up runs and the recording use
// (a CUDA graph cannot record LibTorch's default stream).
struct Recorder {
  c10::DeviceIndex device;
  c10::cuda::CUDAStream side;
  c10::cuda::CUDAStream caller;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  at::cuda::MempoolId_t pool{0, 0};   // the recording's memory pool (known here, for abandon_capture)
  explicit Recorder(c10::DeviceIndex d)
      : device(d), side(c10::cuda::getStreamFromPool(false, d)), caller(c10::cuda::getCurrentCUDAStream(d)) {}
};

template <class F>
int guarded(F&& f) {
  try {
    f();
    return 0;
  } catch (const c10::Error& e) {
    last_error = e.what_without_backtrace();
  } catch (const std::exception& e) {
    last_error = e.what();
  }
  return -1;
}

// The side stream becomes the current one, after the caller's stream's work so far. Every entry
// point below makes the recorder's GPU the current device first (CUDAGraph works on the current
// device; a rank on GPU 1 would otherwise record on GPU 0).
void enter_side(Recorder& r) {
  r.caller = c10::cuda::getCurrentCUDAStream(r.device);
  r.side.synchronize();
  r.caller.synchronize();
  c10::cuda::setCurrentCUDAStream(r.side);
}

void leave_side(Recorder& r) {
  r.side.synchronize();
  c10::cuda::setCurrentCUDAStream(r.caller);
}

// After a recording whose end failed (CUDA invalidated it: a call a capture may not make, or an
// error inside it). LibTorch's CUDAGraph ends its allocators' recording into the pool only once
// cudaStreamEndCapture succeeded, so they would stay in it: the device allocator would never again
// free its cache (an internal assertion at the next emptyCache, which the next recording and the
// callers' out-of-memory retries make). Ends the stream's capture if it still runs, and the
// allocators' recording, and gives the pool back; what the graph had ended is left to its reset().
void abandon_capture(Recorder& r) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(r.side.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(r.side.stream(), &partial) == cudaSuccess && partial != nullptr) cudaGraphDestroy(partial);
  }
  (void)cudaGetLastError();   // the capture's error is reported by the caller
  bool ended_here = true;
  try {
    c10::cuda::CUDACachingAllocator::endAllocateToPool(r.device, r.pool);
  } catch (const c10::Error&) {
    ended_here = false;   // capture_end got past it: the graph's reset() gives the pool back
  }
  if (!ended_here) return;
  at::HostAllocator* host = at::getHostAllocator(at::kCUDA);
  try {
    host->end_allocate_to_pool(r.pool);
  } catch (const c10::Error&) {
  }
  c10::cuda::CUDACachingAllocator::releasePool(r.device, r.pool);
  host->release_pool(r.pool);
}

}  // namespace

extern "C" {

const char* mlip_cuda_graph_error() { return last_error.c_str(); }

int mlip_cuda_graph_new(int device, void** out) {
  return guarded([&] {
    c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
    *out = new Recorder(static_cast<c10::DeviceIndex>(device));
  });
}

void mlip_cuda_graph_delete(void* handle) {
  if (handle == nullptr) return;
  c10::cuda::CUDAGuard device(static_cast<Recorder*>(handle)->device);
  delete static_cast<Recorder*>(handle);
}

// Eager runs before a recording (allocations, the TorchScript executor's profiling runs) go to
// the side stream too.
int mlip_cuda_graph_warmup_begin(void* handle) {
  return guarded([&] {
    auto& r = *static_cast<Recorder*>(handle);
    c10::cuda::CUDAGuard device(r.device);
    enter_side(r);
  });
}

int mlip_cuda_graph_warmup_end(void* handle) {
  return guarded([&] {
    auto& r = *static_cast<Recorder*>(handle);
    c10::cuda::CUDAGuard device(r.device);
    leave_side(r);
  });
}

int mlip_cuda_graph_capture_begin(void* handle) {
  return guarded([&] {
    auto& r = *static_cast<Recorder*>(handle);
    c10::cuda::CUDAGuard device(r.device);
    r.graph.reset();
    // The warm-up's blocks back to the driver: the recording's private pool needs as much again
    // (before the side stream is made current, so that an error here leaves the caller's).
    c10::cuda::CUDACachingAllocator::emptyCache();
    enter_side(r);
    r.graph = std::make_unique<at::cuda::CUDAGraph>();
    r.pool = at::cuda::MemPool::graph_pool_handle(false);   // the pool {0, 0} would make, named here
    try {
      // Thread-local: CUDA calls this thread may not make while it records stay errors, but other
      // threads may make them meanwhile (the trainer's prefetching thread pins host memory).
      r.graph->capture_begin(r.pool, cudaStreamCaptureModeThreadLocal);
    } catch (...) {
      c10::cuda::setCurrentCUDAStream(r.caller);
      throw;
    }
  });
}

int mlip_cuda_graph_capture_end(void* handle) {
  return guarded([&] {
    auto& r = *static_cast<Recorder*>(handle);
    c10::cuda::CUDAGuard device(r.device);
    try {
      r.graph->capture_end();
    } catch (...) {
      abandon_capture(r);
      c10::cuda::setCurrentCUDAStream(r.caller);
      r.graph.reset();
      throw;
    }
    leave_side(r);
  });
}

// Replays on the current stream (after the inputs were copied on it).
int mlip_cuda_graph_replay(void* handle) {
  return guarded([&] {
    auto& r = *static_cast<Recorder*>(handle);
    c10::cuda::CUDAGuard device(r.device);
    if (!r.graph) throw std::runtime_error("no CUDA graph recorded");
    r.graph->replay();
  });
}

// Drops the recording, so that its memory can go before another is made.
int mlip_cuda_graph_drop(void* handle) {
  return guarded([&] {
    auto& r = *static_cast<Recorder*>(handle);
    c10::cuda::CUDAGuard device(r.device);
    r.graph.reset();
  });
}

}  // extern "C"
