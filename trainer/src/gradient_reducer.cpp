#include "gradient_reducer.h"

#include <ATen/ops/_foreach_norm.h>

#include "mlip/error.h"

namespace mlip::trainer {

GradientReducer::GradientReducer(const std::vector<torch::Tensor>& params, std::size_t bucket_bytes)
    : params_(params) {
  std::size_t bytes = 0;
  for (std::size_t k = params_.size(); k-- > 0;) {
    const torch::Tensor& p = params_[k];
    const std::size_t size = static_cast<std::size_t>(p.numel()) * p.element_size();
    const bool same_kind = !buckets_.empty() && params_[buckets_.back().params.front()].options().type_equal(p.options());
    if (buckets_.empty() || !same_kind || bytes + size > bucket_bytes) {
      buckets_.emplace_back();
      bytes = 0;
    }
    buckets_.back().params.push_back(k);
    bytes += size;
  }
  for (Bucket& b : buckets_) {
    int64_t n = 0;
    for (std::size_t k : b.params) n += params_[k].numel();
    b.buffer = torch::empty({n}, params_[b.params.front()].options().requires_grad(false));
  }
}

void GradientReducer::reduce(Communicator& comm) {
  torch::NoGradGuard no_grad;  // copying gradients
  for (torch::Tensor& p : params_) {
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
  }
  if (comm.size() == 1) return;
  for (Bucket& b : buckets_) {
    int64_t offset = 0;
    for (std::size_t k : b.params) {
      const int64_t n = params_[k].numel();
      b.buffer.narrow(0, offset, n).copy_(params_[k].grad().reshape({-1}));
      offset += n;
    }
    comm.allreduce_sum(b.buffer);
    offset = 0;
    for (std::size_t k : b.params) {
      const int64_t n = params_[k].numel();
      params_[k].mutable_grad().copy_(b.buffer.narrow(0, offset, n).view_as(params_[k]));
      offset += n;
    }
  }
  comm.watch_enqueued("a step's all-reduces of gradients");   // once: the last finishes after the others
}

torch::Tensor GradientReducer::gradient_norm_on_device() const {
  std::vector<torch::Tensor> grads;
  grads.reserve(params_.size());
  for (const torch::Tensor& p : params_) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return torch::zeros({}, torch::kFloat64);
  // One kernel for the per-parameter norms on a GPU (of each dtype), then their norm.
  return torch::stack(at::_foreach_norm(grads)).to(torch::kFloat64).norm();
}

void GradientReducer::clip_norm(double max_norm) {
  torch::NoGradGuard no_grad;  // scaling gradients
  const torch::Tensor scale = (max_norm / gradient_norm_on_device()).clamp_max(1.0);
  std::vector<torch::Tensor> grads;
  for (torch::Tensor& p : params_)
    if (p.grad().defined()) grads.push_back(p.mutable_grad());
  if (!grads.empty()) at::_foreach_mul_(grads, scale.to(grads.front().options()));
}

}  // namespace mlip::trainer
