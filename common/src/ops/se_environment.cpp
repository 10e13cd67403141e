// torch.ops.mlip.se_environment: see mlip/ops/se_environment.h.
#include "mlip/ops/se_environment.h"

#include <ATen/core/grad_mode.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "device_launch.h"
#include "se_environment_elements.h"

namespace mlip {
namespace {

using torch::Tensor;
using CT = const torch::Tensor&;
using Pair = std::tuple<Tensor, Tensor>;
using Triple = std::tuple<Tensor, Tensor, Tensor>;

void check(CT v, CT avg, CT std, double rs, double rc, std::initializer_list<std::pair<const Tensor*, int64_t>> per_edge) {
  TORCH_CHECK(v.dim() == 2 && v.size(1) == 3, "se_environment: edge vectors (E, 3) expected, got ", v.sizes());
  TORCH_CHECK(v.scalar_type() == torch::kFloat64 || v.scalar_type() == torch::kFloat32,
              "se_environment: float32 or float64 expected");
  const int64_t edges = v.size(0);
  TORCH_CHECK(avg.numel() == 0 || (avg.dim() == 1 && avg.size(0) == edges),
              "se_environment: avg (E,) or (0,) expected, got ", avg.sizes(), " for ", edges, " edges");
  TORCH_CHECK(std.dim() == 2 && std.size(0) == edges && std.size(1) == 2,
              "se_environment: std (E, 2) expected, got ", std.sizes(), " for ", edges, " edges");
  TORCH_CHECK(!avg.requires_grad() && !std.requires_grad(),
              "se_environment: no gradient reaches avg and std (statistics of the data)");
  TORCH_CHECK(rs >= 0 && rc > rs, "se_environment: 0 <= rcut_smth < rcut expected, got ", rs, " and ", rc);
  for (const auto& [t, width] : per_edge)
    TORCH_CHECK(t->dim() == (width ? 2 : 1) && t->size(0) == edges && (width == 0 || t->size(1) == width),
                "se_environment: an operand of ", edges, (width ? " x " + std::to_string(width) : std::string()),
                " expected, got ", t->sizes());
  for (const Tensor* t : {&avg, &std})
    TORCH_CHECK(t->scalar_type() == v.scalar_type() && t->device() == v.device(),
                "se_environment: operands of one dtype and device expected");
  for (const auto& [t, width] : per_edge)
    TORCH_CHECK(t->scalar_type() == v.scalar_type() && t->device() == v.device(),
                "se_environment: operands of one dtype and device expected");
}

// The ATen formulation: the elements' expressions on columns of every edge (differentiable).
struct Columns {
  Tensor v[3];
  kernels::EnvTerms<Tensor> e;
  Tensor cr, ca;
};
Columns columns(CT v, CT std, double rs, double rc) {
  Columns c{{v.select(1, 0), v.select(1, 1), v.select(1, 2)}, {}, 1 / std.select(1, 0), 1 / std.select(1, 1)};
  const Tensor r = torch::sqrt(c.v[0] * c.v[0] + c.v[1] * c.v[1] + c.v[2] * c.v[2]);
  c.e = kernels::env_terms(torch::clamp((r - rs) / (rc - rs), 0.0, 1.0), 1 / r, 1.0 / (rc - rs));
  return c;
}
Tensor column(CT t, int64_t k) { return t.select(1, k); }

Tensor backward_aten(CT g_radial, CT g_env, CT v, CT std, double rs, double rc) {
  const Columns c = columns(v, std, rs, rc);
  const Tensor g[3] = {column(g_env, 1), column(g_env, 2), column(g_env, 3)};
  Tensor gv[3];
  kernels::env_gradient(c.v, c.e, c.cr, c.ca, g_radial + column(g_env, 0), g, gv);
  return torch::stack({gv[0], gv[1], gv[2]}, 1);
}
Triple second_aten(CT h, CT g_radial, CT g_env, CT v, CT std, double rs, double rc) {
  const Columns c = columns(v, std, rs, rc);
  const Tensor g[3] = {column(g_env, 1), column(g_env, 2), column(g_env, 3)};
  const Tensor hc[3] = {column(h, 0), column(h, 1), column(h, 2)};
  Tensor d0, dg[3], dv[3];
  kernels::env_second(c.v, c.e, c.cr, c.ca, g_radial + column(g_env, 0), g, hc, d0, dg, dv);
  return {d0, torch::stack({d0, dg[0], dg[1], dg[2]}, 1), torch::stack({dv[0], dv[1], dv[2]}, 1)};
}

bool aten_path(CT v) { return detail::kernel_path_without_tables(v.device()) == detail::KernelPath::aten; }

// The device kernels' arguments (contiguous copies kept alive by the caller's `keep`).
template <typename T> kernels::EnvArgs<T> args(std::vector<Tensor>& keep, CT v, CT avg, CT std, CT g_radial, CT g_env,
                                               CT h, double rs, double rc) {
  auto p = [&](CT t) -> const T* {
    if (!t.defined() || t.numel() == 0) return nullptr;
    keep.push_back(t.contiguous());
    return keep.back().data_ptr<T>();
  };
  keep.reserve(6);
  return {p(v), p(avg), p(std), p(g_radial), p(g_env), p(h), T(rs), T(rc)};
}

Pair forward_entry(CT v, CT avg, CT std, double rs, double rc) {
  check(v, avg, std, rs, rc, {});
  if (aten_path(v)) return se_environment_reference(v, avg, std, rs, rc);
  Tensor radial = torch::empty({v.size(0)}, v.options()), env = torch::empty({v.size(0), 4}, v.options());
  AT_DISPATCH_FLOATING_TYPES(v.scalar_type(), "se_environment", [&] {
    std::vector<Tensor> keep;
    const auto o = args<scalar_t>(keep, v, avg, std, {}, {}, {}, rs, rc);
    detail::run_elements(kernels::EnvForward<scalar_t>{o, radial.data_ptr<scalar_t>(), env.data_ptr<scalar_t>()},
                         v.size(0), v.device());
  });
  return {radial, env};
}

Tensor backward_entry(CT g_radial, CT g_env, CT v, CT avg, CT std, double rs, double rc) {
  check(v, avg, std, rs, rc, {{&g_radial, 0}, {&g_env, 4}});
  if (aten_path(v)) return backward_aten(g_radial, g_env, v, std, rs, rc);
  Tensor gv = torch::empty_like(v, at::MemoryFormat::Contiguous);
  AT_DISPATCH_FLOATING_TYPES(v.scalar_type(), "se_environment_backward", [&] {
    std::vector<Tensor> keep;
    const auto o = args<scalar_t>(keep, v, avg, std, g_radial, g_env, {}, rs, rc);
    detail::run_elements(kernels::EnvBackward<scalar_t>{o, gv.data_ptr<scalar_t>()}, v.size(0), v.device());
  });
  return gv;
}

Triple second_entry(CT h, CT g_radial, CT g_env, CT v, CT avg, CT std, double rs, double rc) {
  check(v, avg, std, rs, rc, {{&h, 3}, {&g_radial, 0}, {&g_env, 4}});
  if (aten_path(v)) return second_aten(h, g_radial, g_env, v, std, rs, rc);
  Tensor d_radial = torch::empty({v.size(0)}, v.options()), d_env = torch::empty({v.size(0), 4}, v.options());
  Tensor d_v = torch::empty_like(v, at::MemoryFormat::Contiguous);
  AT_DISPATCH_FLOATING_TYPES(v.scalar_type(), "se_environment_second", [&] {
    std::vector<Tensor> keep;
    const auto o = args<scalar_t>(keep, v, avg, std, g_radial, g_env, h, rs, rc);
    detail::run_elements(kernels::EnvSecond<scalar_t>{o, d_radial.data_ptr<scalar_t>(), d_env.data_ptr<scalar_t>(),
                                                      d_v.data_ptr<scalar_t>()},
                         v.size(0), v.device());
  });
  return {d_radial, d_env, d_v};
}

const auto& forward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::se_environment", "")
                             .typed<Pair(CT, CT, CT, double, double)>();
  return op;
}
const auto& backward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::se_environment_backward", "")
                             .typed<Tensor(CT, CT, CT, CT, CT, double, double)>();
  return op;
}
const auto& second_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::se_environment_second", "")
                             .typed<Triple(CT, CT, CT, CT, CT, CT, double, double)>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class SeEnvironment : public torch::autograd::Function<SeEnvironment> {
 public:
  static variable_list forward(AutogradContext* ctx, CT v, CT avg, CT std, double rs, double rc) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({v, avg, std});
    ctx->saved_data["rs"] = rs;
    ctx->saved_data["rc"] = rc;
    const auto [radial, env] = forward_op().call(v, avg, std, rs, rc);
    return {radial, env};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined() && !g[1].defined()) return {{}, {}, {}, {}, {}};
    const auto s = ctx->get_saved_variables();
    const Tensor g_radial = g[0].defined() ? g[0] : torch::zeros({s[0].size(0)}, s[0].options());
    const Tensor g_env = g[1].defined() ? g[1] : torch::zeros({s[0].size(0), 4}, s[0].options());
    return {backward_op().call(g_radial, g_env, s[0], s[1], s[2], ctx->saved_data["rs"].toDouble(),
                               ctx->saved_data["rc"].toDouble()),
            {}, {}, {}, {}};
  }
};

// The backward as a function of (g_radial, g_env, v): its derivatives along all three in one pass.
class SeEnvironmentBackward : public torch::autograd::Function<SeEnvironmentBackward> {
 public:
  static variable_list forward(AutogradContext* ctx, CT g_radial, CT g_env, CT v, CT avg, CT std, double rs, double rc) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({g_radial, g_env, v, avg, std});
    ctx->saved_data["rs"] = rs;
    ctx->saved_data["rc"] = rc;
    return {backward_op().call(g_radial, g_env, v, avg, std, rs, rc)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list h) {
    if (!h[0].defined()) return {{}, {}, {}, {}, {}, {}, {}};
    const auto s = ctx->get_saved_variables();
    const auto [d_radial, d_env, d_v] = second_op().call(h[0], s[0], s[1], s[2], s[3], s[4],
                                                         ctx->saved_data["rs"].toDouble(), ctx->saved_data["rc"].toDouble());
    return {ctx->needs_input_grad(0) ? d_radial : Tensor(), ctx->needs_input_grad(1) ? d_env : Tensor(),
            ctx->needs_input_grad(2) ? d_v : Tensor(), {}, {}, {}, {}};
  }
};

Pair forward_autograd(CT v, CT avg, CT std, double rs, double rc) {
  const auto out = SeEnvironment::apply(v, avg, std, rs, rc);
  return {out[0], out[1]};
}
Tensor backward_autograd(CT g_radial, CT g_env, CT v, CT avg, CT std, double rs, double rc) {
  return SeEnvironmentBackward::apply(g_radial, g_env, v, avg, std, rs, rc)[0];
}
// Third and higher derivatives: autograd's of the ATen formulation.
Triple second_autograd(CT h, CT g_radial, CT g_env, CT v, CT avg, CT std, double rs, double rc) {
  if (at::GradMode::is_enabled() &&
      (h.requires_grad() || g_radial.requires_grad() || g_env.requires_grad() || v.requires_grad())) {
    check(v, avg, std, rs, rc, {{&h, 3}, {&g_radial, 0}, {&g_env, 4}});
    return second_aten(h, g_radial, g_env, v, std, rs, rc);
  }
  at::AutoDispatchBelowADInplaceOrView below_autograd;
  return second_op().call(h, g_radial, g_env, v, avg, std, rs, rc);
}

}  // namespace

Pair se_environment(CT v, CT avg, CT std, double rcut_smth, double rcut) {
  return forward_op().call(v, avg, std, rcut_smth, rcut);
}

Pair se_environment_reference(CT v, CT avg, CT std, double rcut_smth, double rcut) {
  const Tensor r = torch::sqrt((v * v).sum(1));
  const Tensor u = torch::clamp((r - rcut_smth) / (rcut - rcut_smth), 0.0, 1.0);
  const Tensor s = (u * u * u * (-6.0 * u * u + 15.0 * u - 10.0) + 1.0) / r;
  const Tensor radial = (avg.numel() ? s - avg : s) / std.select(1, 0);
  const Tensor angular = (s / (r * std.select(1, 1))).unsqueeze(1) * v;
  return {radial, torch::cat({radial.unsqueeze(1), angular}, 1)};
}

void link_se_environment_operator() {}

}  // namespace mlip

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("se_environment(Tensor v, Tensor avg, Tensor std, float rcut_smth, float rcut) -> (Tensor, Tensor)");
  m.def("se_environment_backward(Tensor g_radial, Tensor g_env, Tensor v, Tensor avg, Tensor std, float rcut_smth,"
        " float rcut) -> Tensor");
  m.def("se_environment_second(Tensor h, Tensor g_radial, Tensor g_env, Tensor v, Tensor avg, Tensor std,"
        " float rcut_smth, float rcut) -> (Tensor, Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(mlip, CPU, m) {
  m.impl("se_environment", &mlip::forward_entry);
  m.impl("se_environment_backward", &mlip::backward_entry);
  m.impl("se_environment_second", &mlip::second_entry);
}
TORCH_LIBRARY_IMPL(mlip, CUDA, m) {
  m.impl("se_environment", &mlip::forward_entry);
  m.impl("se_environment_backward", &mlip::backward_entry);
  m.impl("se_environment_second", &mlip::second_entry);
}
TORCH_LIBRARY_IMPL(mlip, Autograd, m) {
  m.impl("se_environment", &mlip::forward_autograd);
  m.impl("se_environment_backward", &mlip::backward_autograd);
  m.impl("se_environment_second", &mlip::second_autograd);
}
