// Gradient all-reduce in buckets, the same for every communicator backend (MPI on the host,
// NCCL on the GPU), so that the 2-rank CPU tests exercise the bucketing a GPU run uses.
//
// The parameters are split, in reverse order (the last layers' gradients are ready first in a
// backward pass, as PyTorch's DDP orders them), into buckets of at most `bucket_bytes` (a
// parameter larger than that gets a bucket of its own). Each bucket is one flat buffer,
// allocated once on the parameters' device: the gradients are copied in, the buffer is summed
// over the ranks in one call, and copied back. Summation is elementwise, so the result does not
// depend on the bucket size.
#pragma once

#include <cstddef>
#include <vector>

#include <torch/types.h>

#include "communicator.h"

namespace mlip::trainer {

class GradientReducer {
 public:
  GradientReducer(const std::vector<torch::Tensor>& params, std::size_t bucket_bytes);

  /// Sums every parameter's gradient over the ranks of `comm` (a missing gradient counts as
  /// zeros and is created). Call after the backward passes of a step, on every rank.
  void reduce(Communicator& comm);

  /// The global L2 norm of the gradients, from per-parameter norms (so independent of the
  /// bucketing): one device-to-host copy (gradient_norm_on_device(): none).
  double gradient_norm() const { return gradient_norm_on_device().item<double>(); }
  /// The same where the gradients are, unread (float64, 0-dim).
  torch::Tensor gradient_norm_on_device() const;
  /// Every gradient times min(1, max_norm / the global norm), on their device, unread: bitwise
  /// unchanged where the norm is at most max_norm.
  void clip_norm(double max_norm);

  std::size_t buckets() const { return buckets_.size(); }

 private:
  struct Bucket {
    std::vector<std::size_t> params;  // indices into params_
    torch::Tensor buffer;             // flat, on the parameters' device and dtype
  };
  std::vector<torch::Tensor> params_;
  std::vector<Bucket> buckets_;
};

}  // namespace mlip::trainer
