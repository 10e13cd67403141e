#include "mlip/model/graph_capture.h"

#include <cstdlib>
#include <utility>

#include "mlip/model/cuda_graph_recorder.h"
#include "mlip/error.h"
#include "mlip/model/host_reads.h"
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

GraphCapture::GraphCapture(const Model& model, bool record) : model_(&model), rule_(GroupingRule::of(model)) {
  if (model.head() >= 0 && !model.module().find_method("forward_grouped_heads")) {
    throw Error("this multi-head model has no forward_grouped_heads() (exported by an earlier mlip version): "
                "its chosen head cannot be evaluated on a grouped graph (cuda_graph); export it again with this version");
  }
  if (!record) return;
  if (!model.device().is_cuda()) {
    throw Error("CUDA graphs need the model on a GPU (it is on " + model.device().str() + ")");
  }
  recorder_ = std::make_unique<detail::CudaGraphRecorder>(model.device().index());
}

GraphCapture::~GraphCapture() = default;

void GraphCapture::before_recording(std::function<void()> f) {
  if (recorder_) recorder_->before_recording = std::move(f);
}

void GraphCapture::copy_inputs() {
  const detail::GraphTensors t(grouped_.view());
  input_.species.copy_(t.species);
  input_.edge_index.copy_(t.edge_index);
  input_.edge_vectors.copy_(t.edge_vectors);
}

// Inputs of the new shapes (copies on the GPU, which later steps overwrite), then the recording
// (cuda_graph_recorder.h); the replay that follows computes this step.
void GraphCapture::record() {
  output_ = ModelOutput{};
  recorder_->drop();   // the old recording's memory free before the new inputs
  input_ = detail::model_input(*model_, grouped_.view());
  input_.center_groups = capacity_.centers;
  input_.edge_groups = capacity_.edges;
  recorder_->record([&] { output_ = model_->evaluate(input_, true); });
  ++recordings_;
  recorded_ = true;   // only now: a failed recording is tried again at the next call
}

ModelOutput GraphCapture::evaluate(const GraphView& graph) {
  try {
    return attempt(graph);
  } catch (...) {
    // Nothing half-made is kept (a recording or inputs that ran out of GPU memory): the next call,
    // smaller where the caller splits it (the pair style's sizer), records at its own size.
    forget();
    throw;
  }
}

void GraphCapture::forget() noexcept {
  if (recorder_) recorder_->drop_quietly();
  output_ = ModelOutput{};
  input_ = ModelInput{};
  capacity_ = GroupCapacity{};
  recorded_ = false;
}

ModelOutput GraphCapture::attempt(const GraphView& graph) {
  const bool grown = group_graph(graph, rule_, capacity_, grouped_);
  if (!recorder_ || grouped_.n_centers() == 0) {
    // Unrecorded (eager), as a recording would run it: the operators' device value checks off
    // (group_graph checked the indices), and on a GPU their ATen formulations.
    const DeviceWorkRecorded as_recorded;
    RecordableScope recordable("cuda_graph: the recorded model call");
    ModelOutput out = evaluate_grouped(*model_, grouped_, graph.n_centers, true);
    recordable.done();
    return out;
  }
  if (grown || !recorded_) {
    recorded_ = false;
    record();
  } else {
    copy_inputs();
  }
  recorder_->replay_now();
  return ungroup_output(grouped_, graph.n_centers, output_);
}

}  // namespace mlip
