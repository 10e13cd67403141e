// Operators that read a device's values back to the host wait for the GPU there, and a CUDA graph
// cannot record them: an item() (a tensor made a number: TorchScript's int(), float(), bool(), an
// `if` on a tensor), nonzero and what is built on it (a boolean mask's index, masked_select,
// torch.where with one argument), unique, equal, the checks of linalg's errors. What a recording
// runs (the model call of `cuda_graph yes`, the whole MD step of `graph device cuda_graph yes`, the
// trainer's recorded step) is also run unrecorded ("eager"), which is how ctest runs it on the CPU.
// A RecordableScope around it watches the operators dispatched on its thread (LibTorch's
// RecordFunction callbacks: autograd's backward of CPU tensors runs there too) and, with
// MLIP_CHECK_RECORDABLE=1 in the environment (ctest sets it), done() throws an mlip::Error naming
// the first such operator and those it ran inside: the defect a GPU reports only when it records.
// Not seen: copies to the host (.cpu(), .to()), which are no copies on the CPU, and reads of
// CUDA-only branches. Reads that a CPU kernel makes where its CUDA kernel does not (one_hot with
// num_classes, the fused Adam) are not counted: host_reads.cpp names them.
#pragma once

#include <memory>
#include <string>

namespace mlip {

/// Whether MLIP_CHECK_RECORDABLE=1 (read once per process).
bool recordable_checks_on();

class RecordableScope {
 public:
  /// `what` names the recorded work in the error (e.g. "the whole MD step"). A scope inside another
  /// on the same thread watches nothing of its own (the outer one reports).
  explicit RecordableScope(const char* what);
  ~RecordableScope();
  RecordableScope(const RecordableScope&) = delete;
  RecordableScope& operator=(const RecordableScope&) = delete;

  /// Throws mlip::Error if an operator read the device back (the watch ends either way).
  void done();

  struct Watch;   // host_reads.cpp's

 private:
  void stop() noexcept;
  std::unique_ptr<Watch> watch_;   // null: watching nothing
};

}  // namespace mlip
