// torch.ops.mlip.edge_outer_sum / edge_contract_g / edge_contract_env: see mlip/ops/edge_contraction.h.
#include "mlip/ops/edge_contraction.h"
#include "mlip/ops/operators.h"

#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "cpu_kernels.h"

namespace mlip {
namespace {

struct Dims {
  int64_t a, m;   // environment width A, embedding width M
};

// T_c += env_e (x) g_e for edges [first, last): one read of g, T stays in cache.
template <typename T>
MLIP_KERNEL void outer_sum_edges(const Dims& d, int64_t first, int64_t last, const T* env, const T* g,
                                 const int64_t* center, T* out) {
  for (int64_t e = first; e < last; ++e) {
    const T* ge = g + e * d.m;
    T* o = out + center[e] * d.a * d.m;
    for (int64_t a = 0; a < d.a; ++a) {
      const T w = env[e * d.a + a];
      T* oa = o + a * d.m;
#pragma omp simd
      for (int64_t m = 0; m < d.m; ++m) oa[m] += w * ge[m];
    }
  }
}

// out_e = env_e^T t_c (M values per edge).
template <typename T>
MLIP_KERNEL void contract_g_edges(const Dims& d, int64_t first, int64_t last, const T* env, const T* t,
                                  const int64_t* center, T* out) {
  for (int64_t e = first; e < last; ++e) {
    const T* tc = t + center[e] * d.a * d.m;
    T* oe = out + e * d.m;
    const T w0 = env[e * d.a];
#pragma omp simd
    for (int64_t m = 0; m < d.m; ++m) oe[m] = w0 * tc[m];
    for (int64_t a = 1; a < d.a; ++a) {
      const T w = env[e * d.a + a];
      const T* ta = tc + a * d.m;
#pragma omp simd
      for (int64_t m = 0; m < d.m; ++m) oe[m] += w * ta[m];
    }
  }
}

// out_e = t_c g_e (A values per edge).
template <typename T>
MLIP_KERNEL void contract_env_edges(const Dims& d, int64_t first, int64_t last, const T* g, const T* t,
                                    const int64_t* center, T* out) {
  for (int64_t e = first; e < last; ++e) {
    const T* tc = t + center[e] * d.a * d.m;
    const T* ge = g + e * d.m;
    for (int64_t a = 0; a < d.a; ++a) {
      const T* ta = tc + a * d.m;
      T s = 0;
#pragma omp simd reduction(+ : s)
      for (int64_t m = 0; m < d.m; ++m) s += ta[m] * ge[m];
      out[e * d.a + a] = s;
    }
  }
}

#define MLIP_DEFINE_KERNELS(T)                                                                                   \
  MLIP_CLONES void outer_sum_kernel(const Dims& d, int64_t first, int64_t last, const T* env, const T* g,       \
                                    const int64_t* center, T* out) {                                            \
    outer_sum_edges<T>(d, first, last, env, g, center, out);                                                   \
  }                                                                                                             \
  MLIP_CLONES void contract_g_kernel(const Dims& d, int64_t first, int64_t last, const T* env, const T* t,      \
                                     const int64_t* center, T* out) {                                           \
    contract_g_edges<T>(d, first, last, env, t, center, out);                                                   \
  }                                                                                                             \
  MLIP_CLONES void contract_env_kernel(const Dims& d, int64_t first, int64_t last, const T* g, const T* t,      \
                                       const int64_t* center, T* out) {                                         \
    contract_env_edges<T>(d, first, last, g, t, center, out);                                                   \
  }
MLIP_DEFINE_KERNELS(double)
MLIP_DEFINE_KERNELS(float)
#undef MLIP_DEFINE_KERNELS

// Shapes, dtypes, devices, and the centre indices (the CPU kernels do not check them one by one).
void check(const char* op, const torch::Tensor& rows, const char* rows_name, const torch::Tensor& other,
           const char* other_name, const torch::Tensor& center, int64_t n_centers) {
  TORCH_CHECK(rows.dim() == 2 && other.dim() >= 2 && center.dim() == 1 && center.size(0) == rows.size(0), op,
              ": ", rows_name, " (E, *) and center (E,) expected, got ", rows.sizes(), " and ", center.sizes());
  TORCH_CHECK(rows.scalar_type() == other.scalar_type() && (rows.scalar_type() == torch::kFloat64 ||
                                                            rows.scalar_type() == torch::kFloat32),
              op, ": ", rows_name, " and ", other_name, " must be both float32 or both float64");
  TORCH_CHECK(center.scalar_type() == torch::kInt64, op, ": center must be int64");
  TORCH_CHECK(rows.size(1) > 0 && other.size(-1) > 0, op, ": empty feature dimensions");
  TORCH_CHECK(rows.device() == other.device() && rows.device() == center.device(), op,
              ": all tensors must be on one device");
  if (center.numel() > 0 && device_operand_checks_on()) {
    const auto [lo, hi] = torch::aminmax(center);
    TORCH_CHECK(lo.item<int64_t>() >= 0 && hi.item<int64_t>() < n_centers, op, ": a centre index outside [0, ",
                n_centers, ")");
  }
}

torch::Tensor outer_sum_cpu(const torch::Tensor& env_in, const torch::Tensor& g_in, const torch::Tensor& center_in,
                            int64_t n_centers) {
  check("edge_outer_sum", env_in, "env", g_in, "g", center_in, n_centers);
  TORCH_CHECK(g_in.dim() == 2 && g_in.size(0) == env_in.size(0), "edge_outer_sum: g (E, M) expected");
  const torch::Tensor env = env_in.contiguous(), g = g_in.contiguous(), center = center_in.contiguous();
  const Dims d{env.size(1), g.size(1)};
  torch::Tensor out = torch::zeros({n_centers, d.a, d.m}, g.options());
  AT_DISPATCH_FLOATING_TYPES(g.scalar_type(), "edge_outer_sum", [&] {
    outer_sum_kernel(d, 0, env.size(0), env.data_ptr<scalar_t>(), g.data_ptr<scalar_t>(), center.data_ptr<int64_t>(),
                     out.data_ptr<scalar_t>());
  });
  return out;
}

torch::Tensor contract_g_cpu(const torch::Tensor& env_in, const torch::Tensor& t_in, const torch::Tensor& center_in) {
  check("edge_contract_g", env_in, "env", t_in, "t", center_in, t_in.size(0));
  TORCH_CHECK(t_in.dim() == 3 && t_in.size(1) == env_in.size(1), "edge_contract_g: t (n, A, M) expected");
  const torch::Tensor env = env_in.contiguous(), t = t_in.contiguous(), center = center_in.contiguous();
  const Dims d{t.size(1), t.size(2)};
  torch::Tensor out = torch::empty({env.size(0), d.m}, t.options());
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "edge_contract_g", [&] {
    contract_g_kernel(d, 0, env.size(0), env.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(), center.data_ptr<int64_t>(),
                      out.data_ptr<scalar_t>());
  });
  return out;
}

torch::Tensor contract_env_cpu(const torch::Tensor& g_in, const torch::Tensor& t_in, const torch::Tensor& center_in) {
  check("edge_contract_env", g_in, "g", t_in, "t", center_in, t_in.size(0));
  TORCH_CHECK(t_in.dim() == 3 && t_in.size(2) == g_in.size(1), "edge_contract_env: t (n, A, M) expected");
  const torch::Tensor g = g_in.contiguous(), t = t_in.contiguous(), center = center_in.contiguous();
  const Dims d{t.size(1), t.size(2)};
  torch::Tensor out = torch::empty({g.size(0), d.a}, t.options());
  AT_DISPATCH_FLOATING_TYPES(t.scalar_type(), "edge_contract_env", [&] {
    contract_env_kernel(d, 0, g.size(0), g.data_ptr<scalar_t>(), t.data_ptr<scalar_t>(), center.data_ptr<int64_t>(),
                        out.data_ptr<scalar_t>());
  });
  return out;
}

template <typename... Args> c10::TypedOperatorHandle<torch::Tensor(Args...)> typed_op(const char* name) {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, "").typed<torch::Tensor(Args...)>();
}
using CT = const torch::Tensor&;
const auto& outer_sum_op() {
  static const auto op = typed_op<CT, CT, CT, int64_t>("mlip::edge_outer_sum");
  return op;
}
const auto& contract_g_op() {
  static const auto op = typed_op<CT, CT, CT>("mlip::edge_contract_g");
  return op;
}
const auto& contract_env_op() {
  static const auto op = typed_op<CT, CT, CT>("mlip::edge_contract_env");
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Each operator's backward is made of the other two (through the dispatcher, so with autograd:
// a backward run with create_graph is itself differentiable).
class OuterSum : public torch::autograd::Function<OuterSum> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, CT env, CT g, CT center, int64_t n_centers) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({env, g, center});
    return outer_sum_op().call(env, g, center, n_centers);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto s = ctx->get_saved_variables();
    const OperandsCheckedByForward checked;   // the forward checked the indices: no device reads again
    return {ctx->needs_input_grad(0) ? edge_contract_env(s[1], grad[0], s[2]) : torch::Tensor(),
            ctx->needs_input_grad(1) ? edge_contract_g(s[0], grad[0], s[2]) : torch::Tensor(), {}, {}};
  }
};

class ContractG : public torch::autograd::Function<ContractG> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, CT env, CT t, CT center) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({env, t, center});
    return contract_g_op().call(env, t, center);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto s = ctx->get_saved_variables();
    const OperandsCheckedByForward checked;   // the forward checked the indices: no device reads again
    return {ctx->needs_input_grad(0) ? edge_contract_env(grad[0], s[1], s[2]) : torch::Tensor(),
            ctx->needs_input_grad(1) ? edge_outer_sum(s[0], grad[0], s[2], s[1].size(0)) : torch::Tensor(), {}};
  }
};

class ContractEnv : public torch::autograd::Function<ContractEnv> {
 public:
  static torch::Tensor forward(AutogradContext* ctx, CT g, CT t, CT center) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({g, t, center});
    return contract_env_op().call(g, t, center);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto s = ctx->get_saved_variables();
    const OperandsCheckedByForward checked;   // the forward checked the indices: no device reads again
    return {ctx->needs_input_grad(0) ? edge_contract_g(grad[0], s[1], s[2]) : torch::Tensor(),
            ctx->needs_input_grad(1) ? edge_outer_sum(grad[0], s[0], s[2], s[1].size(0)) : torch::Tensor(), {}};
  }
};

torch::Tensor outer_sum_autograd(CT env, CT g, CT center, int64_t n_centers) {
  return OuterSum::apply(env, g, center, n_centers);
}
torch::Tensor contract_g_autograd(CT env, CT t, CT center) { return ContractG::apply(env, t, center); }
torch::Tensor contract_env_autograd(CT g, CT t, CT center) { return ContractEnv::apply(g, t, center); }

}  // namespace

torch::Tensor edge_outer_sum_reference(CT env, CT g, CT center, int64_t n_centers) {
  return torch::zeros({n_centers, env.size(1), g.size(1)}, g.options())
      .index_add(0, center, env.unsqueeze(2) * g.unsqueeze(1));
}

torch::Tensor edge_contract_g_reference(CT env, CT t, CT center) {
  return (env.unsqueeze(2) * t.index_select(0, center)).sum(1);
}

torch::Tensor edge_contract_env_reference(CT g, CT t, CT center) {
  return (t.index_select(0, center) * g.unsqueeze(1)).sum(2);
}

torch::Tensor edge_outer_sum(CT env, CT g, CT center, int64_t n_centers) {
  return outer_sum_op().call(env, g, center, n_centers);
}
torch::Tensor edge_contract_g(CT env, CT t, CT center) { return contract_g_op().call(env, t, center); }
torch::Tensor edge_contract_env(CT g, CT t, CT center) { return contract_env_op().call(g, t, center); }

void link_edge_operators() {}

namespace {

torch::Tensor outer_sum_checked_reference(CT env, CT g, CT center, int64_t n_centers) {
  check("edge_outer_sum", env, "env", g, "g", center, n_centers);
  return edge_outer_sum_reference(env, g, center, n_centers);
}
torch::Tensor contract_g_checked_reference(CT env, CT t, CT center) {
  check("edge_contract_g", env, "env", t, "t", center, t.size(0));
  return edge_contract_g_reference(env, t, center);
}
torch::Tensor contract_env_checked_reference(CT g, CT t, CT center) {
  check("edge_contract_env", g, "g", t, "t", center, t.size(0));
  return edge_contract_env_reference(g, t, center);
}

}  // namespace

}  // namespace mlip

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("edge_outer_sum(Tensor env, Tensor g, Tensor center, int n_centers) -> Tensor");
  m.def("edge_contract_g(Tensor env, Tensor t, Tensor center) -> Tensor");
  m.def("edge_contract_env(Tensor g, Tensor t, Tensor center) -> Tensor");
}

TORCH_LIBRARY_IMPL(mlip, CPU, m) {
  m.impl("edge_outer_sum", &mlip::outer_sum_cpu);
  m.impl("edge_contract_g", &mlip::contract_g_cpu);
  m.impl("edge_contract_env", &mlip::contract_env_cpu);
}

// No kernels of their own on GPUs yet: the ATen formulation, after the same checks (never run on
// a GPU here).
TORCH_LIBRARY_IMPL(mlip, CUDA, m) {
  m.impl("edge_outer_sum", &mlip::outer_sum_checked_reference);
  m.impl("edge_contract_g", &mlip::contract_g_checked_reference);
  m.impl("edge_contract_env", &mlip::contract_env_checked_reference);
}

TORCH_LIBRARY_IMPL(mlip, Autograd, m) {
  m.impl("edge_outer_sum", &mlip::outer_sum_autograd);
  m.impl("edge_contract_g", &mlip::contract_g_autograd);
  m.impl("edge_contract_env", &mlip::contract_env_autograd);
}
