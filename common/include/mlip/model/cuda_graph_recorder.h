// The recorder of CUDA graphs that GraphCapture, DeviceStep and the trainer's recorded step share:
// libmlip_cuda_graph.so's C interface (common/src/model/cuda_graph_recorder.cpp), loaded with
// dlopen. Internal to mlip: not installed.
#pragma once

#include <dlfcn.h>

#include <functional>
#include <string>

#include "mlip/error.h"
#include "mlip/model/graph_capture.h"
#include "mlip/ops/operators.h"

namespace mlip::detail {

// The C interface of libmlip_cuda_graph.so (common/src/model/cuda_graph_recorder.cpp).
struct CudaGraphRecorder {
  using Fn = int (*)(void*);
  const char* (*error)() = nullptr;
  Fn warmup_begin = nullptr, warmup_end = nullptr, capture_begin = nullptr, capture_end = nullptr, replay = nullptr,
     drop_graph = nullptr;
  void (*destroy)(void*) = nullptr;
  void* handle = nullptr;
  /// Called before each recording's warm-up (a caller's profiler stops there: a capture is not
  /// profiled).
  std::function<void()> before_recording;

  explicit CudaGraphRecorder(int device) {
    const std::string path = cuda_graph_library();
    if (path.empty()) {
      throw Error("CUDA graphs: this mlip was built without libmlip_cuda_graph.so (LibTorch was not a CUDA build)");
    }
    // Kept loaded for the life of the process (never dlclose'd: LibTorch registers nothing from
    // it, but its CUDA objects must outlive every recorder).
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) throw Error("CUDA graphs: cannot load " + path + ": " + dlerror());
    const auto sym = [&](const char* name) {
      void* f = dlsym(lib, name);
      if (f == nullptr) throw Error("CUDA graphs: " + path + " has no " + name);
      return f;
    };
    error = reinterpret_cast<const char* (*)()>(sym("mlip_cuda_graph_error"));
    warmup_begin = reinterpret_cast<Fn>(sym("mlip_cuda_graph_warmup_begin"));
    warmup_end = reinterpret_cast<Fn>(sym("mlip_cuda_graph_warmup_end"));
    capture_begin = reinterpret_cast<Fn>(sym("mlip_cuda_graph_capture_begin"));
    capture_end = reinterpret_cast<Fn>(sym("mlip_cuda_graph_capture_end"));
    replay = reinterpret_cast<Fn>(sym("mlip_cuda_graph_replay"));
    drop_graph = reinterpret_cast<Fn>(sym("mlip_cuda_graph_drop"));
    destroy = reinterpret_cast<void (*)(void*)>(sym("mlip_cuda_graph_delete"));
    auto create = reinterpret_cast<int (*)(int, void**)>(sym("mlip_cuda_graph_new"));
    check(create(device, &handle), "creating a recorder");
  }
  ~CudaGraphRecorder() {
    if (handle != nullptr) destroy(handle);
  }
  void check(int rc, const char* what) const {
    if (rc != 0) throw Error(std::string("CUDA graphs: ") + what + ": " + error());
  }

  // A few eager runs of `call` on the recorder's stream (first allocations, autograd's device
  // threads), then its recording, with no device-to-host reads. Recording runs nothing: a replay
  // computes. Throws mlip::Error (or what `call` throws), leaving no recording open.
  template <class Call> void record(Call&& call) { record(call, call); }
  /// The same with warm-up runs of `warm` (what `call` does without its lasting effects, such as
  /// an optimiser's step) before `call` is recorded.
  /// The warm-ups run as recorded (device value checks off), so that they run the operators'
  /// paths that the recording runs (mlip/ops/operators.h).
  template <class Warm, class Call> void record(Warm&& warm, Call&& call) {
    if (before_recording) before_recording();
    const DeviceWorkRecorded recorded;
    check(warmup_begin(handle), "warm-up");
    try {
      for (int i = 0; i < 3; ++i) warm();
    } catch (...) {
      warmup_end(handle);
      throw;
    }
    check(warmup_end(handle), "warm-up");
    check(capture_begin(handle), "starting a recording");
    try {
      call();
    } catch (...) {
      capture_end(handle);
      throw;
    }
    check(capture_end(handle), "ending a recording");
  }
  void replay_now() { check(replay(handle), "replay"); }
  /// Drops the recording (its memory goes back when the outputs that still hold it are gone).
  void drop() { check(drop_graph(handle), "dropping a recording"); }
  /// drop() where an error is already on its way (its own error is not the one to report).
  void drop_quietly() noexcept { drop_graph(handle); }
};

}  // namespace mlip::detail
