// torch.ops.mlip.bessel_radial: see mlip/ops/bessel_radial.h.
#include "mlip/ops/bessel_radial.h"
#include "mlip/ops/operators.h"

#include <cmath>
#include <type_traits>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "bessel_radial_elements.h"
#include "device_launch.h"

namespace mlip {
namespace {

using torch::Tensor;
using CT = const torch::Tensor&;

void check(CT r, CT frequencies, double cutoff, int64_t p, int64_t order) {
  TORCH_CHECK(r.dim() == 2 && r.size(1) == 1, "bessel_radial: r (E, 1) expected, got ", r.sizes());
  TORCH_CHECK(r.scalar_type() == torch::kFloat64 || r.scalar_type() == torch::kFloat32,
              "bessel_radial: float32 or float64 expected");
  TORCH_CHECK(frequencies.dim() == 1 && frequencies.size(0) >= 1,
              "bessel_radial: frequencies (nb,) with nb >= 1 expected, got ", frequencies.sizes());
  TORCH_CHECK(frequencies.device() == r.device(), "bessel_radial: r and frequencies must be on one device");
  TORCH_CHECK(!frequencies.requires_grad(), "bessel_radial: no gradient reaches the frequencies (a constant)");
  TORCH_CHECK(cutoff > 0, "bessel_radial: cutoff must be > 0, got ", cutoff);
  TORCH_CHECK(p >= 0, "bessel_radial: the envelope's p must be >= 0 (0: none), got ", p);
  TORCH_CHECK(order >= 0 && order <= kernels::kMaxBesselOrder, "bessel_radial: derivative order 0 to ",
              kernels::kMaxBesselOrder, " supported, got ", order);
}

// Kernel F over the edges (contiguous operands) into out.
template <template <typename> class F>
void run(CT r, CT frequencies, double cutoff, int64_t p, bool harmonic, int64_t order, CT g, Tensor& out) {
  const Tensor rc = r.contiguous(), kc = frequencies.to(r.scalar_type()).contiguous();
  const Tensor gc = g.defined() ? g.contiguous() : g;
  AT_DISPATCH_FLOATING_TYPES(r.scalar_type(), "bessel_radial", [&] {
    const kernels::BesselArgs<scalar_t> o{rc.data_ptr<scalar_t>(), kc.data_ptr<scalar_t>(), kc.size(0), p, order,
                                          scalar_t(cutoff), scalar_t(std::sqrt(2.0 / cutoff)), harmonic};
    if constexpr (std::is_same_v<F<scalar_t>, kernels::BesselForward<scalar_t>>)
      detail::run_elements(F<scalar_t>{o, out.data_ptr<scalar_t>()}, r.size(0), r.device());
    else
      detail::run_elements(F<scalar_t>{o, gc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>()}, r.size(0), r.device());
  });
}

bool aten_path(CT r) { return detail::kernel_path(r.device()) == detail::KernelPath::aten; }

Tensor forward_entry(CT r, CT frequencies, double cutoff, int64_t p, bool harmonic, int64_t order) {
  check(r, frequencies, cutoff, p, order);
  if (aten_path(r)) return bessel_radial_reference(r, frequencies, cutoff, p, order);
  Tensor y = torch::empty({r.size(0), frequencies.size(0)}, r.options());
  run<kernels::BesselForward>(r, frequencies, cutoff, p, harmonic, order, {}, y);
  return y;
}

Tensor backward_entry(CT g, CT r, CT frequencies, double cutoff, int64_t p, bool harmonic, int64_t order) {
  check(r, frequencies, cutoff, p, order);
  TORCH_CHECK(g.dim() == 2 && g.size(0) == r.size(0) && g.size(1) == frequencies.size(0) &&
                  g.scalar_type() == r.scalar_type() && g.device() == r.device(),
              "bessel_radial_backward: g (", r.size(0), ", ", frequencies.size(0), ") of r's dtype and device expected, got ",
              g.sizes());
  if (aten_path(r)) return (g * bessel_radial_reference(r, frequencies, cutoff, p, order + 1)).sum(1, true);
  Tensor gr = torch::empty_like(r);
  run<kernels::BesselGrad>(r, frequencies, cutoff, p, harmonic, order, g, gr);
  return gr;
}

using Signature = Tensor(CT, CT, double, int64_t, bool, int64_t);
using BackwardSignature = Tensor(CT, CT, CT, double, int64_t, bool, int64_t);

const auto& forward_op() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("mlip::bessel_radial", "").typed<Signature>();
  return op;
}
const auto& backward_op() {
  static const auto op =
      c10::Dispatcher::singleton().findSchemaOrThrow("mlip::bessel_radial_backward", "").typed<BackwardSignature>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The constants of a call, kept for its backward.
void save(AutogradContext* ctx, double cutoff, int64_t p, bool harmonic, int64_t order) {
  ctx->saved_data["cutoff"] = cutoff;
  ctx->saved_data["p"] = p;
  ctx->saved_data["harmonic"] = harmonic;
  ctx->saved_data["order"] = order;
}
struct Saved {
  double cutoff;
  int64_t p;
  bool harmonic;
  int64_t order;
};
Saved saved(AutogradContext* ctx) {
  auto& d = ctx->saved_data;
  return {d["cutoff"].toDouble(), d["p"].toInt(), d["harmonic"].toBool(), d["order"].toInt()};
}

class BesselRadial : public torch::autograd::Function<BesselRadial> {
 public:
  static variable_list forward(AutogradContext* ctx, CT r, CT frequencies, double cutoff, int64_t p, bool harmonic,
                               int64_t order) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({r, frequencies});
    save(ctx, cutoff, p, harmonic, order);
    return {forward_op().call(r, frequencies, cutoff, p, harmonic, order)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined()) return {{}, {}, {}, {}, {}, {}};
    const auto v = ctx->get_saved_variables();
    const Saved s = saved(ctx);
    return {backward_op().call(g[0], v[0], v[1], s.cutoff, s.p, s.harmonic, s.order), {}, {}, {}, {}, {}};
  }
};

// The backward B(g, r) = sum_n g_n y_n^(order+1)(r) as a function of (g, r): along h (E, 1),
// d/dg = h y^(order+1) and d/dr = B at order + 1 with g h, both through the dispatcher.
class BesselRadialBackward : public torch::autograd::Function<BesselRadialBackward> {
 public:
  static variable_list forward(AutogradContext* ctx, CT g, CT r, CT frequencies, double cutoff, int64_t p,
                               bool harmonic, int64_t order) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({g, r, frequencies});
    save(ctx, cutoff, p, harmonic, order);
    return {backward_op().call(g, r, frequencies, cutoff, p, harmonic, order)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list h) {
    if (!h[0].defined()) return {{}, {}, {}, {}, {}, {}, {}};
    const auto v = ctx->get_saved_variables();
    const Saved s = saved(ctx);
    Tensor dg, dr;
    if (ctx->needs_input_grad(0)) dg = h[0] * forward_op().call(v[1], v[2], s.cutoff, s.p, s.harmonic, s.order + 1);
    if (ctx->needs_input_grad(1)) dr = backward_op().call(v[0] * h[0], v[1], v[2], s.cutoff, s.p, s.harmonic, s.order + 1);
    return {dg, dr, {}, {}, {}, {}, {}};
  }
};

Tensor forward_autograd(CT r, CT frequencies, double cutoff, int64_t p, bool harmonic, int64_t order) {
  return BesselRadial::apply(r, frequencies, cutoff, p, harmonic, order)[0];
}
Tensor backward_autograd(CT g, CT r, CT frequencies, double cutoff, int64_t p, bool harmonic, int64_t order) {
  return BesselRadialBackward::apply(g, r, frequencies, cutoff, p, harmonic, order)[0];
}

// The binomial coefficients C(m, 0..m).
std::vector<double> binomials(int64_t m) {
  std::vector<double> c{1.0};
  for (int64_t a = 0; a < m; ++a) c.push_back(c.back() * double(m - a) / double(a + 1));
  return c;
}

}  // namespace

Tensor bessel_radial(CT r, CT frequencies, double cutoff, int64_t p, bool harmonic, int64_t order) {
  return forward_op().call(r, frequencies, cutoff, p, harmonic, order);
}

Tensor bessel_radial_reference(CT r, CT frequencies, double cutoff, int64_t p, int64_t order) {
  // w[j] = d^j/dr^j (sqrt(2 / cutoff) / r x envelope), as in the kernels (bessel_radial_elements.h)
  std::vector<Tensor> q{std::sqrt(2.0 / cutoff) / r}, env{torch::ones_like(r)};
  for (int64_t b = 1; b <= order; ++b) q.push_back(q.back() * double(-b) / r), env.push_back(torch::zeros_like(r));
  if (p > 0) {
    const Tensor u = r / cutoff, inside = (r < cutoff).to(r.scalar_type());
    const double pp = double(p), coefficient[3] = {-(pp + 1) * (pp + 2) / 2, pp * (pp + 2), -pp * (pp + 1) / 2};
    for (int64_t t = 0; t < 3; ++t) {
      double factor = coefficient[t];
      for (int64_t j = 0; j <= order && j <= p + t; ++j) {
        env[j] = env[j] + factor * torch::pow(u, double(p + t - j));
        factor *= double(p + t - j) / cutoff;
      }
    }
    for (auto& e : env) e = e * inside;
  }
  std::vector<Tensor> w;
  for (int64_t j = 0; j <= order; ++j) {
    const auto c = binomials(j);
    Tensor s = torch::zeros_like(r);
    for (int64_t b = 0; b <= j; ++b) s = s + c[b] * q[b] * env[j - b];
    w.push_back(s);
  }
  const Tensor k = frequencies.to(r.scalar_type()).unsqueeze(0), kr = k * r, s = torch::sin(kr), c = torch::cos(kr);
  const auto ca = binomials(order);
  Tensor y = torch::zeros_like(kr);
  for (int64_t a = 0; a <= order; ++a) {
    const Tensor trig = (a & 1) ? ((a & 2) ? -c : c) : ((a & 2) ? -s : s);
    y = y + ca[a] * torch::pow(k, double(a)) * trig * w[order - a];
  }
  return y;
}

void link_bessel_radial_operator() {}

}  // namespace mlip

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("bessel_radial(Tensor r, Tensor frequencies, float cutoff, int p, bool harmonic, int order) -> Tensor");
  m.def("bessel_radial_backward(Tensor g, Tensor r, Tensor frequencies, float cutoff, int p, bool harmonic, "
        "int order) -> Tensor");
}
TORCH_LIBRARY_IMPL(mlip, CPU, m) {
  m.impl("bessel_radial", &mlip::forward_entry);
  m.impl("bessel_radial_backward", &mlip::backward_entry);
}
TORCH_LIBRARY_IMPL(mlip, CUDA, m) {
  m.impl("bessel_radial", &mlip::forward_entry);
  m.impl("bessel_radial_backward", &mlip::backward_entry);
}
TORCH_LIBRARY_IMPL(mlip, Autograd, m) {
  m.impl("bessel_radial", &mlip::forward_autograd);
  m.impl("bessel_radial_backward", &mlip::backward_autograd);
}
