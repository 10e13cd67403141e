// torch.ops.mlip.vector_polynomials: see mlip/ops/vector_polynomials.h.
#include "mlip/ops/vector_polynomials.h"
#include "mlip/ops/operators.h"

#include <type_traits>

#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "device_launch.h"
#include "vector_polynomials_elements.h"

namespace mlip {
namespace {

using torch::Tensor;
using CT = const torch::Tensor&;

void check(CT u, CT terms, CT coefficients, int64_t n_out) {
  TORCH_CHECK(u.dim() == 2 && u.size(1) == 3, "vector_polynomials: u (E, 3) expected, got ", u.sizes());
  TORCH_CHECK(u.scalar_type() == torch::kFloat64 || u.scalar_type() == torch::kFloat32,
              "vector_polynomials: float32 or float64 expected");
  TORCH_CHECK(terms.dim() == 2 && terms.size(1) == 4 && terms.scalar_type() == torch::kInt64,
              "vector_polynomials: terms (T, 4) int64 expected, got ", terms.sizes(), " ", terms.scalar_type());
  TORCH_CHECK(coefficients.dim() == 1 && coefficients.size(0) == terms.size(0),
              "vector_polynomials: coefficients (", terms.size(0), ",) expected, got ", coefficients.sizes());
  TORCH_CHECK(n_out >= 0, "vector_polynomials: n_out must be >= 0");
  for (CT t : {terms, coefficients})
    TORCH_CHECK(t.device() == u.device(), "vector_polynomials: all tensors must be on one device");
}

// The highest power of the terms, checked with their outputs (the kernel's bounds); the bound
// itself where operands are not read (a CUDA graph's capture, or a backward inside autograd: the
// forward checked this table).
int64_t highest_power(CT terms, int64_t n_out) {
  if (terms.size(0) == 0) return 0;
  if (!device_operand_checks_on()) return kernels::kMaxPolynomialPower;
  const auto [lo, hi] = torch::aminmax(terms, 0);
  const Tensor l = lo.cpu(), h = hi.cpu();
  TORCH_CHECK(l[0].item<int64_t>() >= 0 && h[0].item<int64_t>() < n_out,
              "vector_polynomials: a term's output outside [0, ", n_out, ")");
  TORCH_CHECK(l.narrow(0, 1, 3).min().item<int64_t>() >= 0, "vector_polynomials: a negative power");
  const int64_t top = h.narrow(0, 1, 3).max().item<int64_t>();
  TORCH_CHECK(top <= kernels::kMaxPolynomialPower, "vector_polynomials: powers up to ",
              kernels::kMaxPolynomialPower, " supported, got ", top);
  return top;
}

// Kernel F over the rows of u (contiguous operands) into out.
template <template <typename> class F> void run(CT u, CT terms, CT coefficients, int64_t n_out, CT g, Tensor& out) {
  const int64_t top = highest_power(terms, n_out);
  const Tensor uc = u.contiguous(), tc = terms.contiguous(), cc = coefficients.to(u.scalar_type()).contiguous();
  const Tensor gc = g.defined() ? g.contiguous() : g;
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "vector_polynomials", [&] {
    const kernels::PolynomialArgs<scalar_t> o{uc.data_ptr<scalar_t>(), tc.data_ptr<int64_t>(),
                                              cc.data_ptr<scalar_t>(), tc.size(0), n_out, top};
    if constexpr (std::is_same_v<F<scalar_t>, kernels::PolynomialForward<scalar_t>>)
      detail::run_elements(F<scalar_t>{o, out.data_ptr<scalar_t>()}, u.size(0), u.device());
    else
      detail::run_elements(F<scalar_t>{o, gc.data_ptr<scalar_t>(), out.data_ptr<scalar_t>()}, u.size(0), u.device());
  });
}

bool aten_path(CT u) { return detail::kernel_path(u.device()) == detail::KernelPath::aten; }

Tensor forward_entry(CT u, CT terms, CT coefficients, int64_t n_out) {
  check(u, terms, coefficients, n_out);
  if (aten_path(u)) return vector_polynomials_reference(u, terms, coefficients, n_out);
  Tensor y = torch::empty({u.size(0), n_out}, u.options());
  run<kernels::PolynomialForward>(u, terms, coefficients, n_out, {}, y);
  return y;
}

// The composite d/du: sum_i g[e, i] J[e, :, i], J the derivative polynomials (aten path).
Tensor backward_reference(CT g, CT u, CT terms, CT coefficients) {
  const int64_t n = g.size(1);
  const auto [dterms, dcoefficients] = vector_polynomials_derivatives(terms, coefficients, n);
  return (vector_polynomials(u, dterms, dcoefficients, 3 * n).view({-1, 3, n}) * g.unsqueeze(1)).sum(2);
}

Tensor backward_entry(CT g, CT u, CT terms, CT coefficients) {
  TORCH_CHECK(g.dim() == 2 && g.size(0) == u.size(0) && g.scalar_type() == u.scalar_type() && g.device() == u.device(),
              "vector_polynomials_backward: g (", u.size(0), ", n) of u's dtype and device expected, got ", g.sizes());
  check(u, terms, coefficients, g.size(1));
  if (aten_path(u)) return backward_reference(g, u, terms, coefficients);
  Tensor gu = torch::empty(u.sizes(), u.options());   // (E, 3) contiguous, as the kernel writes it
  run<kernels::PolynomialGrad>(u, terms, coefficients, g.size(1), g, gu);
  return gu;
}

const auto& forward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::vector_polynomials", "")
                             .typed<Tensor(CT, CT, CT, int64_t)>();
  return op;
}
const auto& backward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::vector_polynomials_backward", "")
                             .typed<Tensor(CT, CT, CT, CT)>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class VectorPolynomials : public torch::autograd::Function<VectorPolynomials> {
 public:
  static variable_list forward(AutogradContext* ctx, CT u, CT terms, CT coefficients, int64_t n_out) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({u, terms, coefficients});
    return {forward_op().call(u, terms, coefficients, n_out)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined()) return {{}, {}, {}, {}};
    const auto v = ctx->get_saved_variables();
    const OperandsCheckedByForward checked;   // the forward checked the table: no device reads again
    return {backward_op().call(g[0], v[0], v[1], v[2]), {}, {}, {}};
  }
};

// The backward B(g, u) = sum_i g_i grad P_i(u) as a function of (g, u): along h (E, 3),
//   d/dg = sum_c h_c dP_i/du_c (the derivative polynomials, forward),
//   d/du = B(g', u) of the derivative polynomials with g'[e, c n + i] = h_c g_i,
// both through the dispatcher: derivatives of any order.
class VectorPolynomialsBackward : public torch::autograd::Function<VectorPolynomialsBackward> {
 public:
  static variable_list forward(AutogradContext* ctx, CT g, CT u, CT terms, CT coefficients) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({g, u, terms, coefficients});
    return {backward_op().call(g, u, terms, coefficients)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list h) {
    if (!h[0].defined()) return {{}, {}, {}, {}};
    const auto v = ctx->get_saved_variables();
    const OperandsCheckedByForward checked;   // the forward checked the table: no device reads again
    const Tensor &g = v[0], &u = v[1];
    const int64_t n = g.size(1);
    const auto [dterms, dcoefficients] = vector_polynomials_derivatives(v[2], v[3], n);
    Tensor dg, du;
    if (ctx->needs_input_grad(0))
      dg = (vector_polynomials(u, dterms, dcoefficients, 3 * n).view({-1, 3, n}) * h[0].unsqueeze(2)).sum(1);
    if (ctx->needs_input_grad(1))
      du = backward_op().call((h[0].unsqueeze(2) * g.unsqueeze(1)).reshape({-1, 3 * n}), u, dterms, dcoefficients);
    return {dg, du, {}, {}};
  }
};

Tensor forward_autograd(CT u, CT terms, CT coefficients, int64_t n_out) {
  return VectorPolynomials::apply(u, terms, coefficients, n_out)[0];
}
Tensor backward_autograd(CT g, CT u, CT terms, CT coefficients) {
  return VectorPolynomialsBackward::apply(g, u, terms, coefficients)[0];
}

}  // namespace

Tensor vector_polynomials(CT u, CT terms, CT coefficients, int64_t n_out) {
  return forward_op().call(u, terms, coefficients, n_out);
}

Tensor vector_polynomials_reference(CT u, CT terms, CT coefficients, int64_t n_out) {
  // powers[c][:, k] = u[:, c]^k, k up to the highest power (the kernels' bound where operands are
  // not read), by products (differentiable everywhere, also at u = 0)
  const int64_t top = highest_power(terms, n_out);
  Tensor y = torch::zeros({u.size(0), n_out}, u.options());
  Tensor product = coefficients.to(u.scalar_type()).unsqueeze(0).expand({u.size(0), terms.size(0)});
  for (int64_t c = 0; c < 3; ++c) {
    std::vector<Tensor> powers{torch::ones_like(u.select(1, c))};
    for (int64_t k = 1; k <= top; ++k) powers.push_back(powers.back() * u.select(1, c));
    product = product * torch::stack(powers, 1).index_select(1, terms.select(1, 1 + c));
  }
  return y.index_add(1, terms.select(1, 0), product);
}

std::pair<Tensor, Tensor> vector_polynomials_derivatives(CT terms, CT coefficients, int64_t n_out) {
  // Each term's derivative along x, y and z, into outputs d * n_out + i, on the table's device.
  // Along a direction of power 0 the derivative is zero: its row, of coefficient 0 and the power
  // kept at 0, adds nothing; it is dropped unless operands are not read (a CUDA graph's recording,
  // a backward inside autograd: shapes from the table alone).
  std::vector<Tensor> dterms, dcoefficients, nonzero;
  for (int64_t d = 0; d < 3; ++d) {
    const Tensor power = terms.select(1, 1 + d);
    Tensor t = terms.clone();
    t.select(1, 0).add_(d * n_out);
    t.select(1, 1 + d).sub_(1).clamp_min_(0);
    dterms.push_back(t);
    dcoefficients.push_back(coefficients * power.to(coefficients.scalar_type()));
    nonzero.push_back(power > 0);
  }
  Tensor t = torch::cat(dterms), c = torch::cat(dcoefficients);
  if (!device_operand_checks_on()) return {t, c};
  const Tensor keep = torch::cat(nonzero).nonzero().squeeze(1);
  return {t.index_select(0, keep), c.index_select(0, keep)};
}

void link_vector_polynomials_operator() {}

}  // namespace mlip

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("vector_polynomials(Tensor u, Tensor terms, Tensor coefficients, int n_out) -> Tensor");
  m.def("vector_polynomials_backward(Tensor g, Tensor u, Tensor terms, Tensor coefficients) -> Tensor");
}
TORCH_LIBRARY_IMPL(mlip, CPU, m) {
  m.impl("vector_polynomials", &mlip::forward_entry);
  m.impl("vector_polynomials_backward", &mlip::backward_entry);
}
TORCH_LIBRARY_IMPL(mlip, CUDA, m) {
  m.impl("vector_polynomials", &mlip::forward_entry);
  m.impl("vector_polynomials_backward", &mlip::backward_entry);
}
TORCH_LIBRARY_IMPL(mlip, Autograd, m) {
  m.impl("vector_polynomials", &mlip::forward_autograd);
  m.impl("vector_polynomials_backward", &mlip::backward_autograd);
}
