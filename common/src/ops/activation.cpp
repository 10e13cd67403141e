// torch.ops.mlip.scaled_silu: see mlip/ops/activation.h.
#include "mlip/ops/activation.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "activation_elements.h"
#include "device_launch.h"

namespace mlip {
namespace {

using torch::Tensor;
using CT = const torch::Tensor&;

// The aten formulations (also the path of MLIP_KERNELS=aten).
Tensor backward_reference(CT g, CT x, double c) {
  const Tensor s = torch::sigmoid(x);
  return g * c * (s * (1 + x * (1 - s)));
}
Tensor second_reference(CT h, CT g, CT x, double c) {
  const Tensor s = torch::sigmoid(x);
  return h * g * c * (s * (1 - s) * (2 + x * (1 - 2 * s)));
}

void check(CT x, std::initializer_list<const Tensor*> others) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat64 || x.scalar_type() == torch::kFloat32,
              "scaled_silu: float32 or float64 expected");
  for (const Tensor* t : others)
    TORCH_CHECK(t->sizes() == x.sizes() && t->scalar_type() == x.scalar_type() && t->device() == x.device(),
                "scaled_silu: operands of one shape, dtype and device expected");
}

// Element kernel F of the operands (contiguous) into a new tensor like x.
template <template <typename> class F> Tensor run(CT x, CT g, CT h, double c) {
  const Tensor xc = x.contiguous(), gc = g.defined() ? g.contiguous() : g, hc = h.defined() ? h.contiguous() : h;
  Tensor out = torch::empty_like(xc);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "scaled_silu", [&] {
    auto p = [](CT t) { return t.defined() ? t.data_ptr<scalar_t>() : nullptr; };
    const kernels::SiluArgs<scalar_t> o{p(xc), p(gc), p(hc), scalar_t(c)};
    detail::run_elements(F<scalar_t>{o, out.data_ptr<scalar_t>()}, out.numel(), x.device());
  });
  return out;
}

bool aten_path(CT x) { return detail::kernel_path(x.device()) == detail::KernelPath::aten; }

Tensor forward_entry(CT x, double c) {
  check(x, {});
  return aten_path(x) ? scaled_silu_reference(x, c) : run<kernels::SiluForward>(x, {}, {}, c);
}
Tensor backward_entry(CT g, CT x, double c) {
  check(x, {&g});
  return aten_path(x) ? backward_reference(g, x, c) : run<kernels::SiluGrad>(x, g, {}, c);
}
Tensor second_entry(CT h, CT g, CT x, double c) {
  check(x, {&g, &h});
  return aten_path(x) ? second_reference(h, g, x, c) : run<kernels::SiluSecondX>(x, g, h, c);
}

const auto& forward_op() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("mlip::scaled_silu", "").typed<Tensor(CT, double)>();
  return op;
}
const auto& backward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::scaled_silu_backward", "")
                             .typed<Tensor(CT, CT, double)>();
  return op;
}
const auto& second_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::scaled_silu_second", "")
                             .typed<Tensor(CT, CT, CT, double)>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class ScaledSilu : public torch::autograd::Function<ScaledSilu> {
 public:
  static variable_list forward(AutogradContext* ctx, CT x, double c) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({x});
    ctx->saved_data["c"] = c;
    return {forward_op().call(x, c)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined()) return {{}, {}};
    return {backward_op().call(g[0], ctx->get_saved_variables()[0], ctx->saved_data["c"].toDouble()), {}};
  }
};

// The backward as a function of (g, x): linear in g (its derivative along h: itself with h), and
// scaled_silu_second along x.
class ScaledSiluBackward : public torch::autograd::Function<ScaledSiluBackward> {
 public:
  static variable_list forward(AutogradContext* ctx, CT g, CT x, double c) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({g, x});
    ctx->saved_data["c"] = c;
    return {backward_op().call(g, x, c)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list h) {
    if (!h[0].defined()) return {{}, {}, {}};
    const auto v = ctx->get_saved_variables();
    const double c = ctx->saved_data["c"].toDouble();
    return {ctx->needs_input_grad(0) ? backward_op().call(h[0], v[1], c) : Tensor(),
            ctx->needs_input_grad(1) ? second_op().call(h[0], v[0], v[1], c) : Tensor(), {}};
  }
};

Tensor forward_autograd(CT x, double c) { return ScaledSilu::apply(x, c)[0]; }
Tensor backward_autograd(CT g, CT x, double c) { return ScaledSiluBackward::apply(g, x, c)[0]; }
// Third and higher derivatives: autograd's of the aten formulation.
Tensor second_autograd(CT h, CT g, CT x, double c) {
  if (at::GradMode::is_enabled() && (h.requires_grad() || g.requires_grad() || x.requires_grad()))
    return second_reference(h, g, x, c);
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return second_op().call(h, g, x, c);
}

}  // namespace

Tensor scaled_silu_reference(CT x, double c) { return torch::silu(x) * c; }

Tensor scaled_silu(CT x, double c) { return forward_op().call(x, c); }

void link_activation_operator() {}

}  // namespace mlip

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("scaled_silu(Tensor x, float c) -> Tensor");
  m.def("scaled_silu_backward(Tensor g, Tensor x, float c) -> Tensor");
  m.def("scaled_silu_second(Tensor h, Tensor g, Tensor x, float c) -> Tensor");
}
TORCH_LIBRARY_IMPL(mlip, CPU, m) {
  m.impl("scaled_silu", &mlip::forward_entry);
  m.impl("scaled_silu_backward", &mlip::backward_entry);
  m.impl("scaled_silu_second", &mlip::second_entry);
}
TORCH_LIBRARY_IMPL(mlip, CUDA, m) {
  m.impl("scaled_silu", &mlip::forward_entry);
  m.impl("scaled_silu_backward", &mlip::backward_entry);
  m.impl("scaled_silu_second", &mlip::second_entry);
}
TORCH_LIBRARY_IMPL(mlip, Autograd, m) {
  m.impl("scaled_silu", &mlip::forward_autograd);
  m.impl("scaled_silu_backward", &mlip::backward_autograd);
  m.impl("scaled_silu_second", &mlip::second_autograd);
}
