#include "fused_adam.h"

#include <map>
#include <memory>
#include <utility>
#include <vector>

#include <ATen/ops/_fused_adam.h>
#include <ATen/ops/_fused_adamw.h>
#include <ATen/ops/_foreach_add.h>

namespace mlip::trainer {

namespace {

// Adam's and AdamW's options alike.
struct Hyper {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad;
};

template <class Options> Hyper hyper_of(const Options& o) {
  return {o.lr(), std::get<0>(o.betas()), std::get<1>(o.betas()), o.eps(), o.weight_decay(), o.amsgrad()};
}

// The tensors of the parameters of one device and dtype, as the fused kernels take them.
struct Lists {
  std::vector<torch::Tensor> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, steps;
};

}  // namespace

// The optimizer's state of p as the type it keeps (Adam's or AdamW's: the same fields, but not one
// type), made as torch::optim makes it where there is none yet.
template <class State> State& FusedAdam::state_as(const torch::Tensor& p, bool amsgrad) {
  auto& states = optimizer_.state();
  auto it = states.find(p.unsafeGetTensorImpl());
  if (it == states.end()) {
    auto state = std::make_unique<State>();
    state->step(0);
    state->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    state->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    if (amsgrad) state->max_exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    it = states.emplace(p.unsafeGetTensorImpl(), std::move(state)).first;
  }
  return static_cast<State&>(*it->second);
}

template <class F> void FusedAdam::with_state(const torch::Tensor& p, bool amsgrad, F&& f) {
  if (adamw_)
    f(state_as<torch::optim::AdamWParamState>(p, amsgrad));
  else
    f(state_as<torch::optim::AdamParamState>(p, amsgrad));
}

bool FusedAdam::sync_counts() {
  auto& group = optimizer_.param_groups().at(0);
  const bool amsgrad = adamw_ ? static_cast<const torch::optim::AdamWOptions&>(group.options()).amsgrad()
                              : static_cast<const torch::optim::AdamOptions&>(group.options()).amsgrad();
  torch::NoGradGuard no_grad;
  bool made = false;
  for (const torch::Tensor& p : group.params()) {
    if (!p.grad().defined()) continue;
    made = made || optimizer_.state().count(p.unsafeGetTensorImpl()) == 0;
    int64_t step = 0;
    with_state(p, amsgrad, [&](const auto& state) { step = state.step(); });
    Count& c = counts_[p.unsafeGetTensorImpl()];
    if (c.host != step || !c.on_device.defined()) {
      c.on_device = torch::full({}, static_cast<double>(step), p.options().dtype(torch::kFloat32));
      c.host = step;
      made = true;
    }
  }
  return made;
}

std::vector<torch::Tensor> FusedAdam::state_tensors() {
  std::vector<torch::Tensor> out;
  for (const torch::Tensor& p : optimizer_.param_groups().at(0).params()) {
    if (!p.grad().defined()) continue;
    with_state(p, false, [&](const auto& state) {
      for (const torch::Tensor& t : {state.exp_avg(), state.exp_avg_sq(), state.max_exp_avg_sq(),
                                     counts_.at(p.unsafeGetTensorImpl()).on_device})
        if (t.defined()) out.push_back(t);
    });
  }
  return out;
}

void FusedAdam::launch(const torch::Tensor* lr) {
  auto& group = optimizer_.param_groups().at(0);
  const Hyper h = adamw_ ? hyper_of(static_cast<const torch::optim::AdamWOptions&>(group.options()))
                         : hyper_of(static_cast<const torch::optim::AdamOptions&>(group.options()));
  std::map<std::pair<int, int>, Lists> lists;   // by (device, dtype)
  torch::NoGradGuard no_grad;
  for (const torch::Tensor& p : group.params()) {
    if (!p.grad().defined()) continue;
    Lists& l = lists[{static_cast<int>(p.device().type()) * 256 + p.device().index(), static_cast<int>(p.scalar_type())}];
    l.steps.push_back(counts_.at(p.unsafeGetTensorImpl()).on_device);
    l.params.push_back(p);
    l.grads.push_back(p.grad());
    with_state(p, h.amsgrad, [&](const auto& state) {
      l.exp_avgs.push_back(state.exp_avg());
      l.exp_avg_sqs.push_back(state.exp_avg_sq());
      if (h.amsgrad) l.max_exp_avg_sqs.push_back(state.max_exp_avg_sq());
    });
  }
  for (auto& entry : lists) {
    Lists& l = entry.second;
    at::_foreach_add_(l.steps, 1);   // the kernels take the count of this step
    if (lr != nullptr && adamw_)
      at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, l.steps, *lr, h.beta1,
                        h.beta2, h.weight_decay, h.eps, h.amsgrad, /*maximize=*/false);
    else if (lr != nullptr)
      at::_fused_adam_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, l.steps, *lr, h.beta1, h.beta2,
                       h.weight_decay, h.eps, h.amsgrad, /*maximize=*/false);
    else if (adamw_)
      at::_fused_adamw_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, l.steps, h.lr, h.beta1, h.beta2,
                        h.weight_decay, h.eps, h.amsgrad, /*maximize=*/false);
    else
      at::_fused_adam_(l.params, l.grads, l.exp_avgs, l.exp_avg_sqs, l.max_exp_avg_sqs, l.steps, h.lr, h.beta1, h.beta2,
                       h.weight_decay, h.eps, h.amsgrad, /*maximize=*/false);
  }
}

torch::Tensor FusedAdam::laid_out_as(const torch::Tensor& grad, const torch::Tensor& param) {
  if (!grad.defined() || (grad.sizes() == param.sizes() && grad.strides() == param.strides())) return grad;
  return torch::empty_like(param, grad.options()).copy_(grad);
}

void FusedAdam::advance() {
  for (const torch::Tensor& p : optimizer_.param_groups().at(0).params()) {
    if (!p.grad().defined()) continue;
    with_state(p, false, [](auto& state) { state.step(state.step() + 1); });
    ++counts_.at(p.unsafeGetTensorImpl()).host;
  }
}

}  // namespace mlip::trainer
