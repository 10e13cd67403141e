// A model call recorded once as a CUDA graph and replayed every MD step: one launch instead of
// the few hundred kernels (and their CPU-side dispatch) of a small system's step.
//
// The graph is grouped and padded on the host (mlip/model/grouped_graph.h: static shapes, padding
// policy), copied into the recorded call's input tensors and replayed; a graph that outgrows its
// capacities is recorded anew. Several calls a step (chunks) replay the one recording, padded to
// the largest; a call that fails (out of GPU memory) leaves no recording or capacity behind.
//
// Recording needs LibTorch's CUDA libraries, which mlip does not link (mlip/model/device.h): they come
// with libmlip_cuda_graph.so, built beside mlip when LibTorch is a CUDA build and loaded here
// (MLIP_CUDA_GRAPH_LIBRARY overrides its path, e.g. after moving the build). With `record` false the same grouped evaluation
// runs eagerly, on any device: the code path the CPU tests check.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "mlip/model/grouped_graph.h"
#include "mlip/model/model.h"

namespace mlip {

namespace detail {
struct CudaGraphRecorder;
}

class GraphCapture {
 public:
  /// Throws mlip::Error naming the reason when the model has no forward_grouped(), or, with
  /// `record`, when the model is not on a GPU or libmlip_cuda_graph.so cannot be loaded.
  GraphCapture(const Model& model, bool record);
  ~GraphCapture();
  GraphCapture(const GraphCapture&) = delete;
  GraphCapture& operator=(const GraphCapture&) = delete;

  /// Energies and dE/dr of every edge of `graph` (host memory), in its order, float64 on the CPU.
  /// A call that fails (as one that runs out of GPU memory) leaves no recording and no capacity:
  /// the next records at its own graph's size.
  ModelOutput evaluate(const GraphView& graph);

  /// Drops the recording and its capacity: the next call records at its own graph's size.
  void forget() noexcept;

  /// `f` runs before each recording (none when eager), e.g. to stop a profiler: a capture is not
  /// profiled.
  void before_recording(std::function<void()> f);
  /// How many times the call was recorded (the first time and each capacity growth).
  int64_t recordings() const { return recordings_; }
  const GroupCapacity& capacity() const { return capacity_; }

 private:
  ModelOutput attempt(const GraphView& graph);
  void record();
  void copy_inputs();

  const Model* model_;
  GroupingRule rule_;
  GroupCapacity capacity_;
  GroupedGraph grouped_;
  std::unique_ptr<detail::CudaGraphRecorder> recorder_;   // null: eager
  ModelInput input_;                     // the recorded call's inputs (on the model's device)
  ModelOutput output_;                   // its outputs
  int64_t recordings_ = 0;
  bool recorded_ = false;                // a complete recording for the current capacity
};

/// The path of libmlip_cuda_graph.so that GraphCapture loads ("" if this build has none).
std::string cuda_graph_library();

}  // namespace mlip
