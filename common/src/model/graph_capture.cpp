#include "mlip/model/graph_capture.h"

#include <dlfcn.h>

#include <cstdlib>

#include "mlip/error.h"
#include "mlip/ops/operators.h"
#include "model_internal.h"

namespace mlip {

std::string cuda_graph_library() {
  if (const char* env = std::getenv("MLIP_CUDA_GRAPH_LIBRARY"); env != nullptr && *env) return env;
#ifdef MLIP_CUDA_GRAPH_LIBRARY
  return MLIP_CUDA_GRAPH_LIBRARY;   // where this build put it
#else
  return "";
#endif
}

// The C interface of libmlip_cuda_graph.so (common/src/model/cuda_graph_recorder.cpp).
struct GraphCapture::Recorder {
  using Fn = int (*)(void*);
  const char* (*error)() = nullptr;
  Fn warmup_begin = nullptr, warmup_end = nullptr, capture_begin = nullptr, capture_end = nullptr, replay = nullptr;
  void (*destroy)(void*) = nullptr;
  void* handle = nullptr;

  explicit Recorder(int device) {
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
    destroy = reinterpret_cast<void (*)(void*)>(sym("mlip_cuda_graph_delete"));
    auto create = reinterpret_cast<int (*)(int, void**)>(sym("mlip_cuda_graph_new"));
    check(create(device, &handle), "creating a recorder");
  }
  ~Recorder() {
    if (handle != nullptr) destroy(handle);
  }
  void check(int rc, const char* what) const {
    if (rc != 0) throw Error(std::string("CUDA graphs: ") + what + ": " + error());
  }
};

GraphCapture::GraphCapture(const Model& model, bool record) : model_(&model), rule_(GroupingRule::of(model)) {
  if (!record) return;
  if (!model.device().is_cuda()) {
    throw Error("CUDA graphs need the model on a GPU (it is on " + model.device().str() + ")");
  }
  recorder_ = std::make_unique<Recorder>(model.device().index());
}

GraphCapture::~GraphCapture() = default;

void GraphCapture::copy_inputs() {
  const detail::GraphTensors t(grouped_.view());
  input_.species.copy_(t.species);
  input_.edge_index.copy_(t.edge_index);
  input_.edge_vectors.copy_(t.edge_vectors);
}

// Inputs of the new shapes (copies on the GPU, which later steps overwrite), a few eager runs on
// the recorder's stream (first allocations, autograd's device threads), then the recording.
// Recording runs nothing: the replay that follows computes this step.
void GraphCapture::record() {
  input_ = detail::model_input(*model_, grouped_.view());
  input_.center_groups = capacity_.centers;
  input_.edge_groups = capacity_.edges;
  output_ = ModelOutput{};
  recorder_->check(recorder_->warmup_begin(recorder_->handle), "warm-up");
  try {
    for (int i = 0; i < 3; ++i) model_->evaluate(input_, true);
  } catch (...) {
    recorder_->warmup_end(recorder_->handle);
    throw;
  }
  recorder_->check(recorder_->warmup_end(recorder_->handle), "warm-up");
  {
    const DeviceValueChecksPaused paused;   // no device-to-host reads while recording
    recorder_->check(recorder_->capture_begin(recorder_->handle), "starting a recording");
    try {
      output_ = model_->evaluate(input_, true);
    } catch (...) {
      recorder_->capture_end(recorder_->handle);
      throw;
    }
    recorder_->check(recorder_->capture_end(recorder_->handle), "ending a recording");
  }
  ++recordings_;
  recorded_ = true;   // only now: a failed recording is tried again at the next call
}

ModelOutput GraphCapture::evaluate(const GraphView& graph) {
  const bool grown = group_graph(graph, rule_, capacity_, grouped_);
  if (!recorder_ || grouped_.n_centers() == 0) return evaluate_grouped(*model_, grouped_, graph.n_centers, true);
  if (grown || !recorded_) {
    recorded_ = false;
    record();
  } else {
    copy_inputs();
  }
  recorder_->check(recorder_->replay(recorder_->handle), "replay");
  return ungroup_output(grouped_, graph.n_centers, output_);
}

}  // namespace mlip
