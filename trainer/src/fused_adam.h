// Adam and AdamW steps by ATen's fused kernels (_fused_adam_, _fused_adamw_): one kernel over all
// parameters of a dtype on a GPU, instead of a handful per parameter (batch-1 training on a GPU is
// bound by kernel launches), a vectorised loop on the CPU. The moments and step counts stay the
// torch::optim optimizer's own state, so checkpoints are the same with or without it.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>

namespace mlip::trainer {

class FusedAdam {
 public:
  /// `optimizer`: a torch::optim::Adam or AdamW (decoupled weight decay) whose step() this replaces.
  FusedAdam(torch::optim::Optimizer& optimizer, bool adamw) : optimizer_(optimizer), adamw_(adamw) {}
  /// One step with the options of the optimizer's (single) parameter group, its lr included.
  void step() {
    sync_counts();
    launch(nullptr);
    advance();
  }

  // A step in three parts, for a recorded training step (recorded_step.h), whose replays run the
  // kernels and leave the host's counts to advance():
  /// The optimizer's state made where it has none, and the kernels' step counts renewed from it
  /// where they part (a checkpoint loaded): nothing is allocated by launch(). Returns whether it
  /// made or renewed anything.
  bool sync_counts();
  /// Every tensor launch() updates besides the parameters (moments, step counts), for parameters
  /// with a gradient.
  std::vector<torch::Tensor> state_tensors();
  /// The kernels over every parameter with a gradient: counts + 1, then Adam's update; with `lr`
  /// (0-dim, on the parameters' device) the learning rate read from there, else the group's.
  void launch(const torch::Tensor* lr);
  /// The host's step counts (the state's, which checkpoints save) advanced by one.
  void advance();
  /// `grad` laid out as `param`: itself, or a copy with the parameter's strides. CUDA's fused
  /// kernels refuse a gradient with other strides; backward() lays gradients out so, but
  /// autograd::grad (the recorded step's) returns what the graph made (a transpose's, a slice's).
  static torch::Tensor laid_out_as(const torch::Tensor& grad, const torch::Tensor& param);

 private:
  struct Count {
    torch::Tensor on_device;   // float32 scalar on the parameter's device: the fused kernels' count
    int64_t host = -1;         // the state's step when on_device was last in agreement with it
  };
  template <class State> State& state_as(const torch::Tensor& p, bool amsgrad);
  // f(state) with p's state as the optimizer's own type (AdamParamState or AdamWParamState).
  template <class F> void with_state(const torch::Tensor& p, bool amsgrad, F&& f);

  torch::optim::Optimizer& optimizer_;
  bool adamw_;
  std::unordered_map<const void*, Count> counts_;
};

}  // namespace mlip::trainer
