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

// LibTorch's CUDAGraph, with what the clean-up after a failed recording needs (abandon_capture).
struct Graph : at::cuda::CUDAGraph {
  // Whether the recording ended as far as its reset() gives the pool back.
  bool ended() const { return capture_ended_; }
  // The graph a failed capture_end got from CUDA but did not keep, destroyed (reset() would not).
  void destroy_unkept() {
    if (!capture_ended_ && !has_graph_ && graph_ != nullptr) cudaGraphDestroy(graph_);
    graph_ = nullptr;
  }
};

// One recorded call: its graph, and the side stream that warm-up runs and the recording use
// (a CUDA graph cannot record LibTorch's default stream).
struct Recorder {
  c10::DeviceIndex device;
  c10::cuda::CUDAStream side;
  c10::cuda::CUDAStream caller;
  std::unique_ptr<Graph> graph;
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

// The caller's stream current again first: a synchronize that throws (an earlier kernel's fault)
// must not leave the side stream current for the caller's later work.
void leave_side(Recorder& r) {
  c10::cuda::setCurrentCUDAStream(r.caller);
  r.side.synchronize();
}

// After a recording that failed to begin or to end (CUDA invalidated it: a call a capture may not
// make, or an error inside it). LibTorch's CUDAGraph starts its allocators' recording into the pool
// before the stream's capture begins, and ends it only once the capture ended well, and gives the
// pool back in reset() only after a complete end: otherwise the allocators would stay recording
// and the device allocator would never again free its cache (an internal assertion at the next
// emptyCache, which the next recording and the callers' out-of-memory retries make). Ends the
// stream's capture if it still runs, the allocators' recording where it still runs, and gives the
// pool back where reset() will not; `begun`: whether the pool's recording surely began.
void abandon_capture(Recorder& r, bool begun) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(r.side.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
    cudaGraph_t partial = nullptr;
    if (cudaStreamEndCapture(r.side.stream(), &partial) == cudaSuccess && partial != nullptr) cudaGraphDestroy(partial);
  }
  (void)cudaGetLastError();   // the recording's error is reported by the caller
  const auto quietly = [](auto&& f) {
    try {
      f();
      return true;
    } catch (const std::exception&) {   // not recording into it (ended, or never begun)
      return false;
    }
  };
  at::HostAllocator* host = at::getHostAllocator(at::kCUDA);
  begun = quietly([&] { c10::cuda::CUDACachingAllocator::endAllocateToPool(r.device, r.pool); }) || begun;
  quietly([&] { host->end_allocate_to_pool(r.pool); });
  if (!begun || r.graph->ended()) return;   // nothing made, or the graph's reset() gives it back
  quietly([&] { c10::cuda::CUDACachingAllocator::releasePool(r.device, r.pool); });
  quietly([&] { host->release_pool(r.pool); });
  r.graph->destroy_unkept();
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
    r.graph = std::make_unique<Graph>();
    r.pool = at::cuda::MemPool::graph_pool_handle(false);   // the pool {0, 0} would make, named here
    try {
      // Thread-local: CUDA calls this thread may not make while it records stay errors, but other
      // threads may make them meanwhile (the trainer's prefetching thread pins host memory).
      r.graph->capture_begin(r.pool, cudaStreamCaptureModeThreadLocal);
    } catch (...) {
      abandon_capture(r, false);
      c10::cuda::setCurrentCUDAStream(r.caller);
      r.graph.reset();
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
      abandon_capture(r, true);
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
