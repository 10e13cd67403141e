// torch.ops.mlip.vector_polynomials: see mlip/ops/vector_polynomials.h.
#include "mlip/ops/vector_polynomials.h"
#include "mlip/ops/operators.h"

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
  if (terms.size(0) == 0 || !device_value_checks_on()) return;
  const Tensor out = terms.select(1, 0);
  TORCH_CHECK(out.min().item<int64_t>() >= 0 && out.max().item<int64_t>() < n_out,
              "vector_polynomials: a term's output outside [0, ", n_out, ")");
  TORCH_CHECK(terms.narrow(1, 1, 3).min().item<int64_t>() >= 0, "vector_polynomials: a negative power");
  TORCH_CHECK(terms.size(0) == 1 || (out.narrow(0, 1, out.size(0) - 1) >= out.narrow(0, 0, out.size(0) - 1)).all().item<bool>(),
              "vector_polynomials: the terms must be sorted by output");
}

Tensor forward_entry(CT u, CT terms, CT coefficients, int64_t n_out) {
  check(u, terms, coefficients, n_out);
  if (detail::kernel_path(u.device()) == detail::KernelPath::aten)
    return vector_polynomials_reference(u, terms, coefficients, n_out);
  const Tensor uc = u.contiguous(), tc = terms.contiguous(), cc = coefficients.to(u.scalar_type()).contiguous();
  const Tensor first = torch::cat({torch::zeros({1}, tc.options()),
                                   torch::bincount(tc.select(1, 0), {}, n_out).cumsum(0)});
  Tensor y = torch::empty({u.size(0), n_out}, u.options());
  AT_DISPATCH_FLOATING_TYPES(u.scalar_type(), "vector_polynomials", [&] {
    const kernels::PolynomialArgs<scalar_t> o{uc.data_ptr<scalar_t>(), tc.data_ptr<int64_t>(),
                                              cc.data_ptr<scalar_t>(), first.data_ptr<int64_t>(), n_out};
    detail::run_elements(kernels::PolynomialForward<scalar_t>{o, y.data_ptr<scalar_t>()}, y.numel(), u.device());
  });
  return y;
}

const auto& forward_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::vector_polynomials", "")
                             .typed<Tensor(CT, CT, CT, int64_t)>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// d/du: sum_i g[e, i] J[e, i, :], J the derivative polynomials through the operator itself (so the
// backward is differentiable again).
class VectorPolynomials : public torch::autograd::Function<VectorPolynomials> {
 public:
  static variable_list forward(AutogradContext* ctx, CT u, CT terms, CT coefficients, int64_t n_out) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({u, terms, coefficients});
    ctx->saved_data["n"] = n_out;
    return {forward_op().call(u, terms, coefficients, n_out)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list g) {
    if (!g[0].defined()) return {{}, {}, {}, {}};
    const auto v = ctx->get_saved_variables();
    const int64_t n = ctx->saved_data["n"].toInt();
    const auto [dterms, dcoefficients] = vector_polynomials_derivatives(v[1], v[2]);
    const Tensor J = vector_polynomials(v[0], dterms, dcoefficients, 3 * n).view({-1, n, 3});
    return {(g[0].unsqueeze(2) * J).sum(1), {}, {}, {}};
  }
};

Tensor forward_autograd(CT u, CT terms, CT coefficients, int64_t n_out) {
  return VectorPolynomials::apply(u, terms, coefficients, n_out)[0];
}

}  // namespace

Tensor vector_polynomials(CT u, CT terms, CT coefficients, int64_t n_out) {
  return forward_op().call(u, terms, coefficients, n_out);
}

Tensor vector_polynomials_reference(CT u, CT terms, CT coefficients, int64_t n_out) {
  // powers[c][:, k] = u[:, c]^k, by products (differentiable everywhere, also at u = 0)
  const int64_t top = terms.size(0) ? terms.narrow(1, 1, 3).max().item<int64_t>() : 0;
  Tensor y = torch::zeros({u.size(0), n_out}, u.options());
  Tensor product = coefficients.to(u.scalar_type()).unsqueeze(0).expand({u.size(0), terms.size(0)});
  for (int64_t c = 0; c < 3; ++c) {
    std::vector<Tensor> powers{torch::ones_like(u.select(1, c))};
    for (int64_t k = 1; k <= top; ++k) powers.push_back(powers.back() * u.select(1, c));
    product = product * torch::stack(powers, 1).index_select(1, terms.select(1, 1 + c));
  }
  return y.index_add(1, terms.select(1, 0), product);
}

std::pair<Tensor, Tensor> vector_polynomials_derivatives(CT terms, CT coefficients) {
  std::vector<Tensor> t_parts, c_parts;
  for (int64_t c = 0; c < 3; ++c) {
    const Tensor power = terms.select(1, 1 + c), keep = power > 0;
    Tensor t = terms.index({keep}).clone();
    t.select(1, 1 + c).sub_(1);
    t.select(1, 0).mul_(3).add_(c);
    t_parts.push_back(t);
    c_parts.push_back(coefficients.index({keep}) * power.index({keep}).to(coefficients.scalar_type()));
  }
  const Tensor t = torch::cat(t_parts), cf = torch::cat(c_parts);
  const Tensor order = std::get<1>(torch::sort(t.select(1, 0), /*stable=*/std::optional<bool>(true), /*dim=*/0));
  return {t.index_select(0, order), cf.index_select(0, order)};
}

void link_vector_polynomials_operator() {}

}  // namespace mlip

TORCH_LIBRARY_FRAGMENT(mlip, m) { m.def("vector_polynomials(Tensor u, Tensor terms, Tensor coefficients, int n_out) -> Tensor"); }
TORCH_LIBRARY_IMPL(mlip, CPU, m) { m.impl("vector_polynomials", &mlip::forward_entry); }
TORCH_LIBRARY_IMPL(mlip, CUDA, m) { m.impl("vector_polynomials", &mlip::forward_entry); }
TORCH_LIBRARY_IMPL(mlip, Autograd, m) { m.impl("vector_polynomials", &mlip::forward_autograd); }
