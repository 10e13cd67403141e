// torch.ops.mlip.tabulated_contraction: see mlip/ops/tabulated_embedding.h.
//
// The CPU kernels walk the edges once: per edge they evaluate the M polynomials of its bin
// (Horner, contiguous in M so that the compiler vectorises it) and add env_e (x) G_e to its
// centre's T (forward), or read its centre's dT back (backward). Nothing of size edges x M is
// ever allocated. On a GPU the device kernels (tabulated_embedding_elements.h) or the same
// arithmetic as ATen operations (the reference), as mlip/ops/operators.h's KernelChoice says.
#include "mlip/ops/tabulated_embedding.h"
#include "mlip/ops/operators.h"

#include <cmath>
#include <optional>
#include <tuple>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "cpu_kernels.h"
#include "device_launch.h"
#include "tabulated_embedding_elements.h"

namespace mlip {
namespace {

constexpr int64_t kCoefficients = 6;   // quintic

// An x outside [0, n_bins * step] is an error naming the distance the table was made for (r_min;
// without it, as for the backward, only what would read outside the table: x below it or not
// finite; the top bin is clamped). One pass before the kernels touch memory.
void check_range(const torch::Tensor& x, int64_t n_bins, double step, std::optional<double> r_min) {
  if (x.numel() == 0 || !device_operand_checks_on()) return;
  const double top = static_cast<double>(n_bins) * step;
  const double lo = x.min().item<double>(), hi = x.max().item<double>();
  TORCH_CHECK(std::isfinite(lo) && std::isfinite(hi), "compressed model: a non-finite embedding input (", lo, ", ",
              hi, "): the edge vectors or the model's statistics are not finite");
  // Below 0 only by rounding (float32 switch functions at the cutoff): the first bin's quintic.
  TORCH_CHECK(lo >= -0.01 * step, "compressed model: an embedding input below its table (", lo,
              "): the graph has an edge beyond the model's cutoff");
  TORCH_CHECK(!r_min || hi <= top * (1.0 + 1e-12),
              "compressed model: a neighbour is closer than its embedding table covers (made for distances >= ",
              r_min.value_or(0.0), " A: its input runs to ", top, ", and an edge here gives ", hi,
              ", a distance under ", r_min.value_or(0.0), " A): recompress with a smaller --min-distance, or use the uncompressed model");
}

using kernels::Bin;

template <typename T> MLIP_KERNEL Bin<T> locate(T x, double inv_step, int64_t n_bins) {
  return kernels::locate_bin(x, inv_step, n_bins);
}

// G (and, if gp, dG/dx) of one edge: M values from its bin's 6 x M coefficients.
template <typename T>
MLIP_KERNEL void evaluate_bin(const T* c, int64_t m_size, T t, double inv_step, T* g, T* gp) {
  const T *c0 = c, *c1 = c + m_size, *c2 = c + 2 * m_size, *c3 = c + 3 * m_size, *c4 = c + 4 * m_size,
          *c5 = c + 5 * m_size;
#pragma omp simd
  for (int64_t m = 0; m < m_size; ++m) g[m] = c0[m] + t * (c1[m] + t * (c2[m] + t * (c3[m] + t * (c4[m] + t * c5[m]))));
  if (gp == nullptr) return;
  const T s = static_cast<T>(inv_step);
#pragma omp simd
  for (int64_t m = 0; m < m_size; ++m)
    gp[m] = s * (c1[m] + t * (2 * c2[m] + t * (3 * c3[m] + t * (4 * c4[m] + t * 5 * c5[m]))));
}

struct Shape {
  int64_t n_edges, n_bins, m_size;
  double inv_step;
};

Shape shape_of(const torch::Tensor& x, const torch::Tensor& table, double step) {
  return {x.size(0), table.size(1), table.size(3), 1.0 / step};
}

template <typename T>
MLIP_KERNEL void forward_edges(const Shape& s, int64_t first, int64_t last, const T* x, const T* env,
                               const int64_t* center, const int64_t* net, const T* table, T* out, T* g) {
  for (int64_t e = first; e < last; ++e) {
    const Bin<T> b = locate(x[e], s.inv_step, s.n_bins);
    evaluate_bin(table + (net[e] * s.n_bins + b.k) * kCoefficients * s.m_size, s.m_size, b.t, s.inv_step, g,
                 static_cast<T*>(nullptr));
    T* o = out + center[e] * 4 * s.m_size;
    const T w0 = env[4 * e], w1 = env[4 * e + 1], w2 = env[4 * e + 2], w3 = env[4 * e + 3];
    T *o0 = o, *o1 = o + s.m_size, *o2 = o + 2 * s.m_size, *o3 = o + 3 * s.m_size;
#pragma omp simd
    for (int64_t m = 0; m < s.m_size; ++m) {
      o0[m] += w0 * g[m];
      o1[m] += w1 * g[m];
      o2[m] += w2 * g[m];
      o3[m] += w3 * g[m];
    }
  }
}

template <typename T>
MLIP_KERNEL void backward_edges(const Shape& s, int64_t first, int64_t last, const T* grad, const T* x, const T* env,
                                const int64_t* center, const int64_t* net, const T* table, T* grad_x, T* grad_env,
                                T* g, T* gp) {
  for (int64_t e = first; e < last; ++e) {
    const Bin<T> b = locate(x[e], s.inv_step, s.n_bins);
    evaluate_bin(table + (net[e] * s.n_bins + b.k) * kCoefficients * s.m_size, s.m_size, b.t, s.inv_step, g, gp);
    const T* d0 = grad + center[e] * 4 * s.m_size;
    const T *d1 = d0 + s.m_size, *d2 = d0 + 2 * s.m_size, *d3 = d0 + 3 * s.m_size;
    const T w0 = env[4 * e], w1 = env[4 * e + 1], w2 = env[4 * e + 2], w3 = env[4 * e + 3];
    T e0 = 0, e1 = 0, e2 = 0, e3 = 0, dx = 0;
#pragma omp simd reduction(+ : e0, e1, e2, e3, dx)
    for (int64_t m = 0; m < s.m_size; ++m) {
      e0 += d0[m] * g[m];
      e1 += d1[m] * g[m];
      e2 += d2[m] * g[m];
      e3 += d3[m] * g[m];
      dx += (w0 * d0[m] + w1 * d1[m] + w2 * d2[m] + w3 * d3[m]) * gp[m];
    }
    grad_env[4 * e] = e0;
    grad_env[4 * e + 1] = e1;
    grad_env[4 * e + 2] = e2;
    grad_env[4 * e + 3] = e3;
    grad_x[e] = dx;
  }
}

// One clone per ISA of each kernel (cpu_kernels.h), for both dtypes.

#define MLIP_DEFINE_KERNELS(T)                                                                                     \
  MLIP_CLONES void forward_cpu_kernel(const Shape& s, int64_t first, int64_t last, const T* x, const T* env,     \
                                      const int64_t* center, const int64_t* net, const T* table, T* out, T* g) { \
    forward_edges<T>(s, first, last, x, env, center, net, table, out, g);                                         \
  }                                                                                                               \
  MLIP_CLONES void backward_cpu_kernel(const Shape& s, int64_t first, int64_t last, const T* grad, const T* x,    \
                                       const T* env, const int64_t* center, const int64_t* net, const T* table,  \
                                       T* grad_x, T* grad_env, T* g, T* gp) {                                     \
    backward_edges<T>(s, first, last, grad, x, env, center, net, table, grad_x, grad_env, g, gp);                 \
  }
MLIP_DEFINE_KERNELS(double)
MLIP_DEFINE_KERNELS(float)
#undef MLIP_DEFINE_KERNELS

void check_inputs(const torch::Tensor& x, const torch::Tensor& env, const torch::Tensor& center,
                  const torch::Tensor& net, const torch::Tensor& table) {
  TORCH_CHECK(x.dim() == 1 && env.dim() == 2 && env.size(1) == 4 && env.size(0) == x.size(0),
              "tabulated_contraction: x (E,) and env (E, 4) expected");
  TORCH_CHECK(center.numel() == x.numel() && net.numel() == x.numel(), "tabulated_contraction: center, net (E,)");
  TORCH_CHECK(table.dim() == 4 && table.size(2) == kCoefficients, "tabulated_contraction: table (nets, bins, 6, M)");
  TORCH_CHECK(x.scalar_type() == table.scalar_type() && env.scalar_type() == table.scalar_type(),
              "tabulated_contraction: x, env and table must have one dtype");
  TORCH_CHECK(center.scalar_type() == torch::kInt64 && net.scalar_type() == torch::kInt64 && center.dim() == 1 &&
                  net.dim() == 1, "tabulated_contraction: center and net must be int64 (E,)");
  for (const torch::Tensor* t : {&env, &center, &net, &table})
    TORCH_CHECK(t->device() == x.device(), "tabulated_contraction: all tensors must be on one device");
  TORCH_CHECK(!table.requires_grad(), "tabulated_contraction: the table is not trainable (compressed models are "
              "for inference; train the uncompressed model)");
}

// Indices inside the output and the table (the CPU kernels do not check them one by one).
void check_indices(const torch::Tensor& center, const torch::Tensor& net, int64_t n_centers, int64_t n_nets) {
  if (center.numel() == 0 || !device_operand_checks_on()) return;
  TORCH_CHECK(center.min().item<int64_t>() >= 0 && center.max().item<int64_t>() < n_centers,
              "tabulated_contraction: a centre index outside [0, n_centers)");
  TORCH_CHECK(net.min().item<int64_t>() >= 0 && net.max().item<int64_t>() < n_nets,
              "tabulated_contraction: a net index outside the table's ", n_nets, " nets");
}

// Threads (at::parallel_for; this file is built with OpenMP where the compiler has it). The
// forward sums edges into their centre's row: with centres in non-decreasing order (neighbour
// lists, batches, the grouped graph's groups) each thread takes a range of edges that starts and
// ends at a change of centre, so no two threads write one row and each row sums its edges in the
// order one thread would: the result is bitwise that of one thread. Other orders run on one thread.
constexpr int64_t kGrainEdges = 256;

bool centres_sorted(const int64_t* center, int64_t n) {
  for (int64_t e = 1; e < n; ++e)
    if (center[e] < center[e - 1]) return false;
  return true;
}

// The first edge at or after `at` that starts a new centre (or n).
int64_t centre_start(const int64_t* center, int64_t n, int64_t at) {
  while (at > 0 && at < n && center[at] == center[at - 1]) ++at;
  return at;
}

// The operands are checked and contiguous from here on.
torch::Tensor forward_cpu(const torch::Tensor& x, const torch::Tensor& env, const torch::Tensor& center,
                          const torch::Tensor& net, const torch::Tensor& table, double step, int64_t n_centers) {
  torch::Tensor out = torch::zeros({n_centers, 4, table.size(3)}, table.options());
  const Shape s = shape_of(x, table, step);
  const int64_t* c = center.data_ptr<int64_t>();
  const bool split = centres_sorted(c, s.n_edges);
  AT_DISPATCH_FLOATING_TYPES(table.scalar_type(), "tabulated_contraction", [&] {
    auto run = [&](int64_t first, int64_t last) {
      std::vector<scalar_t> g(s.m_size);
      forward_cpu_kernel(s, first, last, x.data_ptr<scalar_t>(), env.data_ptr<scalar_t>(), c,
                         net.data_ptr<int64_t>(), table.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), g.data());
    };
    if (!split) return run(0, s.n_edges);
    at::parallel_for(0, s.n_edges, kGrainEdges, [&](int64_t begin, int64_t end) {
      run(centre_start(c, s.n_edges, begin), centre_start(c, s.n_edges, end));
    });
  });
  return out;
}

std::tuple<torch::Tensor, torch::Tensor> backward_cpu(const torch::Tensor& grad, const torch::Tensor& x,
                                                      const torch::Tensor& env, const torch::Tensor& center,
                                                      const torch::Tensor& net, const torch::Tensor& table,
                                                      double step) {
  torch::Tensor grad_x = torch::empty_like(x), grad_env = torch::empty_like(env);
  const Shape s = shape_of(x, table, step);
  AT_DISPATCH_FLOATING_TYPES(table.scalar_type(), "tabulated_contraction_backward", [&] {
    at::parallel_for(0, s.n_edges, kGrainEdges, [&](int64_t first, int64_t last) {
      std::vector<scalar_t> g(s.m_size), gp(s.m_size);
      backward_cpu_kernel(s, first, last, grad.data_ptr<scalar_t>(), x.data_ptr<scalar_t>(),
                          env.data_ptr<scalar_t>(), center.data_ptr<int64_t>(), net.data_ptr<int64_t>(),
                          table.data_ptr<scalar_t>(), grad_x.data_ptr<scalar_t>(), grad_env.data_ptr<scalar_t>(),
                          g.data(), gp.data());
    });
  });
  return {grad_x, grad_env};
}

// The device kernels (tabulated_embedding_elements.h); the forward walks edges by centre.
template <typename T>
kernels::TableArgs<T> device_args(const torch::Tensor& x, const torch::Tensor& env, const torch::Tensor& center,
                                  const torch::Tensor& net, const torch::Tensor& table, double step,
                                  const T* grad = nullptr, const int64_t* by = nullptr, const int64_t* first = nullptr) {
  return {table.size(1),      table.size(3),     1.0 / step,           x.data_ptr<T>(),
          env.data_ptr<T>(),  table.data_ptr<T>(), grad,               center.data_ptr<int64_t>(),
          net.data_ptr<int64_t>(), by,           first};
}

torch::Tensor forward_device(const torch::Tensor& x, const torch::Tensor& env, const torch::Tensor& center,
                             const torch::Tensor& net, const torch::Tensor& table, double step, int64_t n_centers) {
  torch::Tensor by, first;  // (no structured bindings: lambdas capture them from C++20 only)
  std::tie(by, first) = detail::grouped_by(center, n_centers);
  torch::Tensor out = torch::empty({n_centers, 4, table.size(3)}, table.options());
  AT_DISPATCH_FLOATING_TYPES(table.scalar_type(), "tabulated_contraction", [&] {
    const auto o = device_args<scalar_t>(x, env, center, net, table, step, nullptr, by.data_ptr<int64_t>(),
                                         first.data_ptr<int64_t>());
    using Forward = kernels::TabulatedForward<scalar_t>;
    detail::run_elements(Forward{o, out.data_ptr<scalar_t>()}, n_centers * Forward::threads_per_center(table.size(3)),
                         x.device());
  });
  return out;
}

std::tuple<torch::Tensor, torch::Tensor> backward_device(const torch::Tensor& grad, const torch::Tensor& x,
                                                         const torch::Tensor& env, const torch::Tensor& center,
                                                         const torch::Tensor& net, const torch::Tensor& table,
                                                         double step) {
  torch::Tensor grad_x = torch::empty_like(x), grad_env = torch::empty_like(env);
  AT_DISPATCH_FLOATING_TYPES(table.scalar_type(), "tabulated_contraction_backward", [&] {
    const auto o = device_args<scalar_t>(x, env, center, net, table, step, grad.data_ptr<scalar_t>());
    detail::run_elements(
        kernels::TabulatedBackward<scalar_t>{o, grad_x.data_ptr<scalar_t>(), grad_env.data_ptr<scalar_t>()},
        x.numel(), x.device());
  });
  return {grad_x, grad_env};
}

// The reference's pieces: each edge's coefficients (E, 6, M), and powers of t for G and dG/dx.
struct EdgeCoefficients {
  torch::Tensor coef, t;
  EdgeCoefficients(const torch::Tensor& x, const torch::Tensor& net, const torch::Tensor& table, double step) {
    const int64_t n_bins = table.size(1);
    const torch::Tensor u = x / step;
    const torch::Tensor k = u.detach().floor().clamp(0, n_bins - 1).to(torch::kInt64);
    t = u - k.to(u.scalar_type());
    coef = table.reshape({-1, kCoefficients, table.size(3)}).index_select(0, net * n_bins + k);
  }
  torch::Tensor value() const {   // (E, M)
    torch::Tensor g = coef.select(1, kCoefficients - 1);
    for (int64_t p = kCoefficients - 2; p >= 0; --p) g = coef.select(1, p) + t.unsqueeze(1) * g;
    return g;
  }
  torch::Tensor derivative(double step) const {   // (E, M), dG/dx
    torch::Tensor g = coef.select(1, kCoefficients - 1) * static_cast<double>(kCoefficients - 1);
    for (int64_t p = kCoefficients - 2; p >= 1; --p) g = coef.select(1, p) * static_cast<double>(p) + t.unsqueeze(1) * g;
    return g / step;
  }
};

std::tuple<torch::Tensor, torch::Tensor> backward_reference(const torch::Tensor& grad, const torch::Tensor& x,
                                                            const torch::Tensor& env, const torch::Tensor& center,
                                                            const torch::Tensor& net, const torch::Tensor& table,
                                                            double step) {
  const EdgeCoefficients c(x, net, table, step);
  const torch::Tensor dt = grad.index_select(0, center);   // (E, 4, M)
  const torch::Tensor grad_env = (dt * c.value().unsqueeze(1)).sum(2);
  const torch::Tensor grad_x = ((dt * env.unsqueeze(2)).sum(1) * c.derivative(step)).sum(1);
  return {grad_x, grad_env};
}

torch::Tensor forward_reference(const torch::Tensor& x, const torch::Tensor& env, const torch::Tensor& center,
                                const torch::Tensor& net, const torch::Tensor& table, double step, double r_min,
                                int64_t n_centers) {
  check_inputs(x, env, center, net, table);
  check_range(x, table.size(1), step, r_min);
  const torch::Tensor g = EdgeCoefficients(x, net, table, step).value();
  return torch::zeros({n_centers, 4, table.size(3)}, table.options())
      .index_add(0, center, env.unsqueeze(2) * g.unsqueeze(1));
}

// The operator's entries on every device: the checks, then the path (mlip/ops/operators.h's
// KernelChoice) on contiguous operands.
torch::Tensor forward_entry(const torch::Tensor& x, const torch::Tensor& env, const torch::Tensor& center,
                            const torch::Tensor& net, const torch::Tensor& table, double step, double r_min,
                            int64_t n_centers) {
  const auto how = detail::kernel_path(x.device());
  if (how == detail::KernelPath::aten) return forward_reference(x, env, center, net, table, step, r_min, n_centers);
  check_inputs(x, env, center, net, table);
  check_range(x, table.size(1), step, r_min);
  check_indices(center, net, n_centers, table.size(0));
  const auto run = how == detail::KernelPath::cpu_kernels ? forward_cpu : forward_device;
  return run(x.contiguous(), env.contiguous(), center.contiguous(), net.contiguous(), table.contiguous(), step,
             n_centers);
}

std::tuple<torch::Tensor, torch::Tensor> backward_entry(const torch::Tensor& grad, const torch::Tensor& x,
                                                        const torch::Tensor& env, const torch::Tensor& center,
                                                        const torch::Tensor& net, const torch::Tensor& table,
                                                        double step) {
  check_inputs(x, env, center, net, table);
  TORCH_CHECK(grad.dim() == 3 && grad.size(1) == 4 && grad.size(2) == table.size(3) &&
                  grad.scalar_type() == x.scalar_type() && grad.device() == x.device(),
              "tabulated_contraction_backward: grad (n_centers, 4, M) of x's dtype and device expected, got ",
              grad.sizes());
  check_range(x, table.size(1), step, std::nullopt);
  check_indices(center, net, grad.size(0), table.size(0));
  const auto how = detail::kernel_path(x.device());
  if (how == detail::KernelPath::aten) return backward_reference(grad, x, env, center, net, table, step);
  const auto run = how == detail::KernelPath::cpu_kernels ? backward_cpu : backward_device;
  return run(grad.contiguous(), x.contiguous(), env.contiguous(), center.contiguous(), net.contiguous(),
             table.contiguous(), step);
}

c10::OperatorHandle find_op(const char* name, const char* overload = "") {
  return c10::Dispatcher::singleton().findSchemaOrThrow(name, overload);
}

class TabulatedContraction : public torch::autograd::Function<TabulatedContraction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& env,
                               const torch::Tensor& center, const torch::Tensor& net, const torch::Tensor& table,
                               double step, double r_min, int64_t n_centers) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    static const auto op = find_op("mlip::tabulated_contraction")
                               .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                                    const torch::Tensor&, const torch::Tensor&, double, double, int64_t)>();
    ctx->save_for_backward({x, env, center, net, table});
    ctx->saved_data["step"] = step;
    return op.call(x, env, center, net, table, step, r_min, n_centers);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    TORCH_CHECK(!at::GradMode::is_enabled(), "compressed models have no second derivatives (a force loss, a "
                "Hessian): use the uncompressed model");
    static const auto op =
        find_op("mlip::tabulated_contraction_backward")
            .typed<std::tuple<torch::Tensor, torch::Tensor>(const torch::Tensor&, const torch::Tensor&,
                                                            const torch::Tensor&, const torch::Tensor&,
                                                            const torch::Tensor&, const torch::Tensor&, double)>();
    const auto saved = ctx->get_saved_variables();
    const OperandsCheckedByForward checked;   // the forward checked the indices: no device reads again
    auto [grad_x, grad_env] =
        op.call(grad_out[0], saved[0], saved[1], saved[2], saved[3], saved[4], ctx->saved_data["step"].toDouble());
    return {grad_x, grad_env, {}, {}, {}, {}, {}, {}};
  }
};

torch::Tensor forward_autograd(const torch::Tensor& x, const torch::Tensor& env, const torch::Tensor& center,
                               const torch::Tensor& net, const torch::Tensor& table, double step, double r_min,
                               int64_t n_centers) {
  return TabulatedContraction::apply(x, env, center, net, table, step, r_min, n_centers);
}

}  // namespace

torch::Tensor tabulated_contraction_reference(const torch::Tensor& x, const torch::Tensor& env,
                                              const torch::Tensor& center, const torch::Tensor& net,
                                              const torch::Tensor& table, double step, double r_min,
                                              int64_t n_centers) {
  return forward_reference(x, env, center, net, table, step, r_min, n_centers);
}

void link_tabulated_operator() {}

torch::Tensor tabulated_contraction(const torch::Tensor& x, const torch::Tensor& env, const torch::Tensor& center,
                                    const torch::Tensor& net, const torch::Tensor& table, double step, double r_min,
                                    int64_t n_centers) {
  static const auto op = find_op("mlip::tabulated_contraction")
                             .typed<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                                                  const torch::Tensor&, const torch::Tensor&, double, double, int64_t)>();
  return op.call(x, env, center, net, table, step, r_min, n_centers);
}

}  // namespace mlip

TORCH_LIBRARY(mlip, m) {
  m.def("tabulated_contraction(Tensor x, Tensor env, Tensor center, Tensor net, Tensor table, float step, "
        "float r_min, int n_centers) -> Tensor");
  m.def("tabulated_contraction_backward(Tensor grad, Tensor x, Tensor env, Tensor center, Tensor net, "
        "Tensor table, float step) -> (Tensor, Tensor)");
}

TORCH_LIBRARY_IMPL(mlip, CPU, m) {
  m.impl("tabulated_contraction", &mlip::forward_entry);
  m.impl("tabulated_contraction_backward", &mlip::backward_entry);
}
TORCH_LIBRARY_IMPL(mlip, CUDA, m) {
  m.impl("tabulated_contraction", &mlip::forward_entry);
  m.impl("tabulated_contraction_backward", &mlip::backward_entry);
}
TORCH_LIBRARY_IMPL(mlip, Autograd, m) { m.impl("tabulated_contraction", &mlip::forward_autograd); }
