// torch.ops.mlip.vector_message: see mlip/ops/vector_message.h.
#include "mlip/ops/vector_message.h"
#include "mlip/ops/operators.h"

#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include <tuple>

#include "cpu_kernels.h"
#include "device_launch.h"
#include "vector_message_elements.h"

namespace mlip {
namespace {

using torch::Tensor;
using CT = const torch::Tensor&;

// The edges' operands, rows of contiguous arrays.
template <typename T> struct Edges {
  int64_t f;                  // features F
  const T *phi, *w, *v, *unit;
  const int64_t *center, *neighbor;
};

// ds_c += x_s, dv_c += v_j x_vv + unit (x) x_vs for edges [0, n).
template <typename T> MLIP_KERNEL void message_edges(const Edges<T>& a, int64_t n, T* ds, T* dv) {
  const int64_t f = a.f;
  for (int64_t e = 0; e < n; ++e) {
    const T* p = a.phi + a.neighbor[e] * 3 * f;
    const T* w = a.w + e * 3 * f;
    const T* vj = a.v + a.neighbor[e] * 3 * f;
    T* s = ds + a.center[e] * f;
    T* vc = dv + a.center[e] * 3 * f;
#pragma omp simd
    for (int64_t i = 0; i < f; ++i) s[i] += p[i] * w[i];
    for (int64_t k = 0; k < 3; ++k) {
      const T u = a.unit[e * 3 + k];
#pragma omp simd
      for (int64_t i = 0; i < f; ++i)
        vc[k * f + i] += vj[k * f + i] * (p[f + i] * w[f + i]) + u * (p[2 * f + i] * w[2 * f + i]);
    }
  }
}

// The gradients of the sums with respect to phi, w, v and unit, given gs (n_out, F) and gv
// (n_out, 3, F), in one pass over edges [0, n).
template <typename T>
MLIP_KERNEL void gradient_edges(const Edges<T>& a, int64_t n, const T* gs, const T* gv, T* gphi, T* gw, T* gvin,
                                T* gunit) {
  const int64_t f = a.f;
  for (int64_t e = 0; e < n; ++e) {
    const int64_t j = a.neighbor[e];
    const T* p = a.phi + j * 3 * f;
    const T* w = a.w + e * 3 * f;
    const T* vj = a.v + j * 3 * f;
    const T* gsc = gs + a.center[e] * f;
    const T* gvc = gv + a.center[e] * 3 * f;
    const T u0 = a.unit[e * 3], u1 = a.unit[e * 3 + 1], u2 = a.unit[e * 3 + 2];
    T* gp = gphi + j * 3 * f;
    T* gwe = gw + e * 3 * f;
    T* gvj = gvin + j * 3 * f;
#pragma omp simd
    for (int64_t i = 0; i < f; ++i) {
      const T g0 = gvc[i], g1 = gvc[f + i], g2 = gvc[2 * f + i];
      const T gxvv = g0 * vj[i] + g1 * vj[f + i] + g2 * vj[2 * f + i];
      const T gxvs = g0 * u0 + g1 * u1 + g2 * u2;
      gp[i] += gsc[i] * w[i];
      gp[f + i] += gxvv * w[f + i];
      gp[2 * f + i] += gxvs * w[2 * f + i];
      gwe[i] = gsc[i] * p[i];
      gwe[f + i] = gxvv * p[f + i];
      gwe[2 * f + i] = gxvs * p[2 * f + i];
      const T xvv = p[f + i] * w[f + i];
      gvj[i] += g0 * xvv;
      gvj[f + i] += g1 * xvv;
      gvj[2 * f + i] += g2 * xvv;
    }
    T t0 = 0, t1 = 0, t2 = 0;
#pragma omp simd reduction(+ : t0, t1, t2)
    for (int64_t i = 0; i < f; ++i) {
      const T xvs = p[2 * f + i] * w[2 * f + i];
      t0 += gvc[i] * xvs;
      t1 += gvc[f + i] * xvs;
      t2 += gvc[2 * f + i] * xvs;
    }
    gunit[e * 3] = t0;
    gunit[e * 3 + 1] = t1;
    gunit[e * 3 + 2] = t2;
  }
}

#define MLIP_DEFINE_KERNELS(T)                                                                                 \
  MLIP_CLONES void message_kernel(const Edges<T>& a, int64_t n, T* ds, T* dv) { message_edges<T>(a, n, ds, dv); } \
  MLIP_CLONES void gradient_kernel(const Edges<T>& a, int64_t n, const T* gs, const T* gv, T* gphi, T* gw,       \
                                   T* gvin, T* gunit) {                                                       \
    gradient_edges<T>(a, n, gs, gv, gphi, gw, gvin, gunit);                                                   \
  }
MLIP_DEFINE_KERNELS(double)
MLIP_DEFINE_KERNELS(float)
#undef MLIP_DEFINE_KERNELS

void check_index(const char* name, CT index, int64_t bound) {
  TORCH_CHECK(index.dim() == 1 && index.scalar_type() == torch::kInt64, "vector_message: ", name,
              " must be (E,) int64, got ", index.sizes(), " ", index.scalar_type());
  if (index.numel() == 0 || !device_operand_checks_on()) return;
  const auto [lo, hi] = torch::aminmax(index);
  TORCH_CHECK(lo.item<int64_t>() >= 0 && hi.item<int64_t>() < bound, "vector_message: a ", name,
              " index outside [0, ", bound, ")");
}

// Shapes, dtypes, devices and indices (the CPU kernels do not check them one by one).
void check(CT phi, CT w, CT v, CT unit, CT center, CT neighbor, int64_t n_out) {
  TORCH_CHECK(phi.dim() == 2 && phi.size(1) % 3 == 0 && phi.size(1) > 0, "vector_message: phi (N, 3F) expected, got ",
              phi.sizes());
  const int64_t f = phi.size(1) / 3, nodes = phi.size(0), edges = w.size(0);
  TORCH_CHECK(w.dim() == 2 && w.size(1) == 3 * f, "vector_message: w (E, 3F) expected, got ", w.sizes());
  TORCH_CHECK(v.dim() == 3 && v.size(0) == nodes && v.size(1) == 3 && v.size(2) == f,
              "vector_message: v (N, 3, F) expected, got ", v.sizes());
  TORCH_CHECK(unit.dim() == 2 && unit.size(0) == edges && unit.size(1) == 3, "vector_message: unit (E, 3) expected, got ",
              unit.sizes());
  TORCH_CHECK(center.numel() == edges && neighbor.numel() == edges,
              "vector_message: center and neighbor need one entry per edge");
  TORCH_CHECK(n_out >= 0, "vector_message: n_out must be >= 0");
  for (CT t : {w, v, unit})
    TORCH_CHECK(t.scalar_type() == phi.scalar_type(), "vector_message: phi, w, v and unit must have one dtype");
  TORCH_CHECK(phi.scalar_type() == torch::kFloat64 || phi.scalar_type() == torch::kFloat32,
              "vector_message: float32 or float64 expected");
  for (CT t : {w, v, unit, center, neighbor})
    TORCH_CHECK(t.device() == phi.device(), "vector_message: all tensors must be on one device");
  check_index("center", center, n_out);
  check_index("neighbor", neighbor, nodes);
}

template <typename T> Edges<T> edges_of(CT phi, CT w, CT v, CT unit, CT center, CT neighbor) {
  return {phi.size(1) / 3,          phi.data_ptr<T>(),          w.data_ptr<T>(),
          v.data_ptr<T>(),          unit.data_ptr<T>(),         center.data_ptr<int64_t>(),
          neighbor.data_ptr<int64_t>()};
}

// The operands are checked and contiguous from here on.
std::tuple<Tensor, Tensor> message_cpu(CT phi, CT w, CT v, CT unit, CT center, CT neighbor, int64_t n_out) {
  const int64_t f = phi.size(1) / 3;
  Tensor ds = torch::zeros({n_out, f}, phi.options()), dv = torch::zeros({n_out, 3, f}, phi.options());
  AT_DISPATCH_FLOATING_TYPES(phi.scalar_type(), "vector_message", [&] {
    message_kernel(edges_of<scalar_t>(phi, w, v, unit, center, neighbor), w.size(0), ds.data_ptr<scalar_t>(),
                   dv.data_ptr<scalar_t>());
  });
  return {ds, dv};
}

// The gradients of phi, w, v and unit with aten operations (differentiable).
std::vector<Tensor> gradients_reference(CT gs, CT gv, CT phi, CT w, CT v, CT unit, CT center, CT neighbor) {
  const int64_t f = phi.size(1) / 3;
  const Tensor pj = phi.index_select(0, neighbor), gvc = gv.index_select(0, center);
  const Tensor gx = torch::cat({gs.index_select(0, center), (gvc * v.index_select(0, neighbor)).sum(1),
                                (gvc * unit.unsqueeze(2)).sum(1)},
                               1);
  const Tensor xvv = pj.narrow(1, f, f) * w.narrow(1, f, f), xvs = pj.narrow(1, 2 * f, f) * w.narrow(1, 2 * f, f);
  return {torch::zeros_like(phi).index_add(0, neighbor, gx * w), gx * pj,
          torch::zeros_like(v).index_add(0, neighbor, gvc * xvv.unsqueeze(1)), (gvc * xvs.unsqueeze(1)).sum(2)};
}

std::vector<Tensor> gradients_cpu(CT gs, CT gv, CT phi, CT w, CT v, CT unit, CT center, CT neighbor) {
  Tensor gphi = torch::zeros_like(phi), gw = torch::empty_like(w), gvin = torch::zeros_like(v),
         gunit = torch::empty_like(unit);
  AT_DISPATCH_FLOATING_TYPES(phi.scalar_type(), "vector_message_backward", [&] {
    gradient_kernel(edges_of<scalar_t>(phi, w, v, unit, center, neighbor), w.size(0), gs.data_ptr<scalar_t>(),
                    gv.data_ptr<scalar_t>(), gphi.data_ptr<scalar_t>(), gw.data_ptr<scalar_t>(),
                    gvin.data_ptr<scalar_t>(), gunit.data_ptr<scalar_t>());
  });
  return {gphi, gw, gvin, gunit};
}

// The device kernels (vector_message_elements.h) and the tables their sums walk: edges by centre
// (the forward), by neighbour (the backward), on the operands' device.
template <typename T>
kernels::VectorArgs<T> device_args(CT phi, CT w, CT v, CT unit, CT center, CT neighbor, CT by, CT first,
                                   const T* gs = nullptr, const T* gv = nullptr) {
  const bool forward = gs == nullptr;
  const int64_t* p = by.data_ptr<int64_t>();
  const int64_t* q = first.data_ptr<int64_t>();
  return {phi.size(1) / 3,         phi.data_ptr<T>(),    w.data_ptr<T>(),   v.data_ptr<T>(), unit.data_ptr<T>(),
          gs,                      gv,                   center.data_ptr<int64_t>(), neighbor.data_ptr<int64_t>(),
          forward ? p : nullptr,   forward ? q : nullptr, forward ? nullptr : p, forward ? nullptr : q};
}

std::tuple<Tensor, Tensor> message_device(CT phi, CT w, CT v, CT unit, CT center, CT neighbor, int64_t n_out) {
  torch::Tensor by, first;  // (no structured bindings: lambdas capture them from C++20 only)
  std::tie(by, first) = detail::grouped_by(center, n_out);
  const int64_t f = phi.size(1) / 3;
  Tensor ds = torch::empty({n_out, f}, phi.options()), dv = torch::empty({n_out, 3, f}, phi.options());
  AT_DISPATCH_FLOATING_TYPES(phi.scalar_type(), "vector_message", [&] {
    const auto o = device_args<scalar_t>(phi, w, v, unit, center, neighbor, by, first);
    detail::run_elements(kernels::VectorForwardS<scalar_t>{o, ds.data_ptr<scalar_t>()}, ds.numel(), phi.device());
    detail::run_elements(kernels::VectorForwardV<scalar_t>{o, dv.data_ptr<scalar_t>()}, dv.numel(), phi.device());
  });
  return {ds, dv};
}

std::vector<Tensor> gradients_device(CT gs, CT gv, CT phi, CT w, CT v, CT unit, CT center, CT neighbor) {
  torch::Tensor by, first;  // (no structured bindings: lambdas capture them from C++20 only)
  std::tie(by, first) = detail::grouped_by(neighbor, phi.size(0));
  Tensor gphi = torch::empty_like(phi), gw = torch::empty_like(w), gvin = torch::empty_like(v),
         gunit = torch::empty_like(unit);
  AT_DISPATCH_FLOATING_TYPES(phi.scalar_type(), "vector_message_backward", [&] {
    const auto o = device_args<scalar_t>(phi, w, v, unit, center, neighbor, by, first, gs.data_ptr<scalar_t>(),
                                         gv.data_ptr<scalar_t>());
    const auto at = phi.device();
    detail::run_elements(kernels::VectorGradPhi<scalar_t>{o, gphi.data_ptr<scalar_t>()}, gphi.numel(), at);
    detail::run_elements(kernels::VectorGradW<scalar_t>{o, gw.data_ptr<scalar_t>()}, gw.numel(), at);
    detail::run_elements(kernels::VectorGradV<scalar_t>{o, gvin.data_ptr<scalar_t>()}, gvin.numel(), at);
    detail::run_elements(kernels::VectorGradUnit<scalar_t>{o, gunit.data_ptr<scalar_t>()}, gunit.numel(), at);
  });
  return {gphi, gw, gvin, gunit};
}

const auto& message_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::vector_message", "")
                             .typed<std::tuple<Tensor, Tensor>(CT, CT, CT, CT, CT, CT, int64_t)>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Backward: the kernels of the operator's path, or the aten formulation when the backward itself is
// differentiated (create_graph).
class VectorMessage : public torch::autograd::Function<VectorMessage> {
 public:
  static variable_list forward(AutogradContext* ctx, CT phi, CT w, CT v, CT unit, CT center, CT neighbor,
                               int64_t n_out) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({phi, w, v, unit, center, neighbor});
    ctx->saved_data["n_out"] = n_out;
    auto [ds, dv] = message_op().call(phi, w, v, unit, center, neighbor, n_out);
    return {ds, dv};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto s = ctx->get_saved_variables();
    const OperandsCheckedByForward checked;   // the forward checked the indices: no device reads again
    const int64_t n_out = ctx->saved_data["n_out"].toInt(), f = s[0].size(1) / 3;
    const Tensor gs_full = grad[0].defined() ? grad[0] : torch::zeros({n_out, f}, s[0].options());
    const Tensor gv_full = grad[1].defined() ? grad[1] : torch::zeros({n_out, 3, f}, s[0].options());
    const auto how = detail::kernel_path(s[0].device());
    std::vector<Tensor> g;
    if (at::GradMode::is_enabled() || how == detail::KernelPath::aten) {
      g = gradients_reference(gs_full, gv_full, s[0], s[1], s[2], s[3], s[4], s[5]);
    } else {
      const auto run = how == detail::KernelPath::cpu_kernels ? gradients_cpu : gradients_device;
      g = run(gs_full.contiguous(), gv_full.contiguous(), s[0].contiguous(), s[1].contiguous(), s[2].contiguous(),
              s[3].contiguous(), s[4].contiguous(), s[5].contiguous());
    }
    return {g[0], g[1], g[2], g[3], {}, {}, {}};
  }
};

std::tuple<Tensor, Tensor> message_autograd(CT phi, CT w, CT v, CT unit, CT center, CT neighbor, int64_t n_out) {
  auto out = VectorMessage::apply(phi, w, v, unit, center, neighbor, n_out);
  return {out[0], out[1]};
}

// The operator's entry on every device: the checks, then the path (mlip/ops/operators.h's
// KernelChoice) on contiguous operands.
std::tuple<Tensor, Tensor> message_entry(CT phi, CT w, CT v, CT unit, CT center, CT neighbor, int64_t n_out) {
  check(phi, w, v, unit, center, neighbor, n_out);
  const auto how = detail::kernel_path(phi.device());
  if (how == detail::KernelPath::aten) return vector_message_reference(phi, w, v, unit, center, neighbor, n_out);
  const auto run = how == detail::KernelPath::cpu_kernels ? message_cpu : message_device;
  return run(phi.contiguous(), w.contiguous(), v.contiguous(), unit.contiguous(), center.contiguous(),
             neighbor.contiguous(), n_out);
}

}  // namespace

std::tuple<Tensor, Tensor> vector_message_reference(CT phi, CT w, CT v, CT unit, CT center, CT neighbor,
                                                    int64_t n_out) {
  const int64_t f = phi.size(1) / 3;
  const Tensor x = phi.index_select(0, neighbor) * w;
  const Tensor dv = v.index_select(0, neighbor) * x.narrow(1, f, f).unsqueeze(1) +
                    unit.unsqueeze(2) * x.narrow(1, 2 * f, f).unsqueeze(1);
  return {torch::zeros({n_out, f}, phi.options()).index_add(0, center, x.narrow(1, 0, f)),
          torch::zeros({n_out, 3, f}, phi.options()).index_add(0, center, dv)};
}

std::tuple<Tensor, Tensor> vector_message(CT phi, CT w, CT v, CT unit, CT center, CT neighbor, int64_t n_out) {
  return message_op().call(phi, w, v, unit, center, neighbor, n_out);
}

void link_vector_message_operator() {}

}  // namespace mlip

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("vector_message(Tensor phi, Tensor w, Tensor v, Tensor unit, Tensor center, Tensor neighbor, int n_out) -> "
        "(Tensor, Tensor)");
}
TORCH_LIBRARY_IMPL(mlip, CPU, m) { m.impl("vector_message", &mlip::message_entry); }
TORCH_LIBRARY_IMPL(mlip, CUDA, m) { m.impl("vector_message", &mlip::message_entry); }
TORCH_LIBRARY_IMPL(mlip, Autograd, m) { m.impl("vector_message", &mlip::message_autograd); }
