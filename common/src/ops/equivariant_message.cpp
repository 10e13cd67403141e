// torch.ops.mlip.equivariant_message: see mlip/ops/equivariant_message.h.
#include "mlip/ops/equivariant_message.h"
#include "mlip/ops/operators.h"

#include <algorithm>
#include <tuple>
#include <type_traits>
#include <vector>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "cpu_dot.h"
#include "cpu_kernels.h"
#include "device_launch.h"
#include "equivariant_message_elements.h"

namespace mlip {
namespace {

using torch::Tensor;
using CT = const torch::Tensor&;

// The operands, rows of contiguous arrays.
template <typename T> struct Operands {
  int64_t a, c, k, p;          // components, channels, outputs, paths
  const T *x, *s, *w;
  const int64_t *path, *center, *neighbor;
};

// msg[c, k, :] += w[e, path[k], :] * sum_a s[e, a, k] x[j, a, :] for edge e.
template <typename T> MLIP_KERNEL void message_edge(const Operands<T>& o, int64_t e, T* msg) {
  const int64_t A = o.a, C = o.c, K = o.k, P = o.p;
  const T* xj = o.x + o.neighbor[e] * A * C;
  const T* se = o.s + e * A * K;
  const T* we = o.w + e * P * C;
  T* mc = msg + o.center[e] * K * C;
  for (int64_t k = 0; k < K; ++k) {
    const T* wk = we + o.path[k] * C;
    T* out = mc + k * C;
    for (int64_t a = 0; a < A; ++a) {
      const T sk = se[a * K + k];
      if (sk == T(0)) continue;
      const T* xa = xj + a * C;
#pragma omp simd
      for (int64_t u = 0; u < C; ++u) out[u] += wk[u] * (sk * xa[u]);
    }
  }
}

// Edges [0, n) in order, or the n edges listed in `edges` (a group of centres' edges, in order).
template <typename T> MLIP_KERNEL void message_edges(const Operands<T>& o, const int64_t* edges, int64_t n, T* msg) {
  for (int64_t i = 0; i < n; ++i) message_edge(o, edges ? edges[i] : i, msg);
}

// Which gradients the backward computes: bits of x, s and w (a force loss's second derivatives
// need two of the three per call, MD's forces no x's gradient in the first layer).
constexpr int64_t kNeedX = 1, kNeedS = 2, kNeedW = 4, kNeedAll = 7;

// Channels in chunks of kChunk: a chunk's sums stay in registers while the terms are added.
constexpr int64_t kChunk = 16;

// acc[v] = sum_i c[i * c_step] rows[i * row_step + v] for v < W (W = kChunk, or the last chunk's
// width n_v), the terms in order of i; terms with c = 0 skipped (s is mostly zeros: each output
// couples one block of components).
template <typename T, int64_t W>
MLIP_KERNEL void combine(const T* c, int64_t c_step, const T* rows, int64_t row_step, int64_t n, int64_t n_v, T* acc) {
  const int64_t width = W > 0 ? W : n_v;
  T sum[kChunk] = {};
  for (int64_t i = 0; i < n; ++i) {
    const T ci = c[i * c_step];
    if (ci == T(0)) continue;
    const T* r = rows + i * row_step;
#pragma omp simd
    for (int64_t v = 0; v < width; ++v) sum[v] += ci * r[v];
  }
  for (int64_t v = 0; v < width; ++v) acc[v] = sum[v];
}

// fn(u0, width, full) for the channel chunks of C.
template <typename Fn> MLIP_KERNEL void for_chunks(int64_t C, Fn fn) {
  int64_t u0 = 0;
  for (; u0 + kChunk <= C; u0 += kChunk) fn(u0, kChunk, std::true_type{});
  if (u0 < C) fn(u0, C - u0, std::false_type{});
}

// The gradients of s and w of edges [e0, e1) given g (n_out, K, C), and each edge's share of x's
// gradient, sum_k s[e, a, k] g[c, k, :] w[e, path[k], :], in row e - e0 of cx (A x C per edge);
// those of NX, NS, NW only. scratch: K x C.
template <typename T, bool NX, bool NS, bool NW>
MLIP_KERNEL void edge_gradients(const Operands<T>& o, int64_t e0, int64_t e1, const T* g, T* gs, T* gw, T* cx,
                                T* scratch) {
  const int64_t A = o.a, C = o.c, K = o.k, P = o.p;
  T* t = scratch;  // g * w, per output
  for (int64_t e = e0; e < e1; ++e) {
    const T* xj = o.x + o.neighbor[e] * A * C;
    const T* se = o.s + e * A * K;
    const T* we = o.w + e * P * C;
    const T* gc = g + o.center[e] * K * C;
    if constexpr (NX || NS)
      for (int64_t k = 0; k < K; ++k) {
        const T *gk = gc + k * C, *wk = we + o.path[k] * C;
        T* tk = t + k * C;
#pragma omp simd
        for (int64_t u = 0; u < C; ++u) tk[u] = gk[u] * wk[u];
      }
    if constexpr (NS) {
      T* gse = gs + e * A * K;
      for (int64_t a = 0; a < A; ++a)
        for (int64_t k = 0; k < K; ++k) gse[a * K + k] = detail::dot_of(t + k * C, xj + a * C, C);
    }
    if constexpr (NX) {  // cx[a] = sum_k s[a, k] t[k]
      T* cxe = cx + (e - e0) * A * C;
      for (int64_t a = 0; a < A; ++a)
        for_chunks(C, [&](int64_t u0, int64_t n_v, auto full) {
          combine<T, decltype(full)::value ? kChunk : 0>(se + a * K, 1, t + u0, C, K, n_v, cxe + a * C + u0);
        });
    }
    if constexpr (NW) {  // gw[path[k]] += g[k] * sum_a s[a, k] x[a]
      T* gwe = gw + e * P * C;
      for (int64_t i = 0; i < P * C; ++i) gwe[i] = T(0);  // here, in cache, rather than a pass over gw
      for (int64_t k = 0; k < K; ++k) {
        const T* gk = gc + k * C;
        T* gwk = gwe + o.path[k] * C;
        for_chunks(C, [&](int64_t u0, int64_t n_v, auto full) {
          T m[kChunk];
          combine<T, decltype(full)::value ? kChunk : 0>(se + k, K, xj + u0, C, A, n_v, m);
#pragma omp simd
          for (int64_t v = 0; v < n_v; ++v) gwk[u0 + v] += gk[u0 + v] * m[v];
        });
      }
    }
  }
}

template <typename T>
MLIP_KERNEL void edge_gradients_of(int64_t need, const Operands<T>& o, int64_t e0, int64_t e1, const T* g, T* gs,
                                   T* gw, T* cx, T* scratch) {
  switch (need) {
    case kNeedX: return edge_gradients<T, true, false, false>(o, e0, e1, g, gs, gw, cx, scratch);
    case kNeedS: return edge_gradients<T, false, true, false>(o, e0, e1, g, gs, gw, cx, scratch);
    case kNeedW: return edge_gradients<T, false, false, true>(o, e0, e1, g, gs, gw, cx, scratch);
    case kNeedX | kNeedS: return edge_gradients<T, true, true, false>(o, e0, e1, g, gs, gw, cx, scratch);
    case kNeedX | kNeedW: return edge_gradients<T, true, false, true>(o, e0, e1, g, gs, gw, cx, scratch);
    case kNeedS | kNeedW: return edge_gradients<T, false, true, true>(o, e0, e1, g, gs, gw, cx, scratch);
    default: return edge_gradients<T, true, true, true>(o, e0, e1, g, gs, gw, cx, scratch);
  }
}

// gx[j] += cx[e - e0] for the edges [e0, e1) whose neighbour j is in [j0, j1), in edge order.
template <typename T>
MLIP_KERNEL void add_shares(const Operands<T>& o, int64_t e0, int64_t e1, int64_t j0, int64_t j1, const T* cx, T* gx) {
  const int64_t AC = o.a * o.c;
  for (int64_t e = e0; e < e1; ++e) {
    const int64_t j = o.neighbor[e];
    if (j < j0 || j >= j1) continue;
    const T* ce = cx + (e - e0) * AC;
    T* gxj = gx + j * AC;
#pragma omp simd
    for (int64_t i = 0; i < AC; ++i) gxj[i] += ce[i];
  }
}

#define MLIP_DEFINE_KERNELS(T)                                                                              \
  MLIP_CLONES void message_kernel(const Operands<T>& o, const int64_t* edges, int64_t n, T* msg) {           \
    message_edges<T>(o, edges, n, msg);                                                                      \
  }                                                                                                          \
  MLIP_CLONES void edge_gradient_kernel(int64_t need, const Operands<T>& o, int64_t e0, int64_t e1, const T* g, \
                                        T* gs, T* gw, T* cx, T* scratch) {                                   \
    edge_gradients_of<T>(need, o, e0, e1, g, gs, gw, cx, scratch);                                           \
  }                                                                                                          \
  MLIP_CLONES void add_shares_kernel(const Operands<T>& o, int64_t e0, int64_t e1, int64_t j0, int64_t j1,     \
                                     const T* cx, T* gx) {                                                   \
    add_shares<T>(o, e0, e1, j0, j1, cx, gx);                                                                \
  }
MLIP_DEFINE_KERNELS(double)
MLIP_DEFINE_KERNELS(float)
#undef MLIP_DEFINE_KERNELS

void check_index(const char* name, CT index, int64_t count, int64_t bound) {
  TORCH_CHECK(index.dim() == 1 && index.scalar_type() == torch::kInt64 && index.numel() == count,
              "equivariant_message: ", name, " must be (", count, ",) int64, got ", index.sizes(), " ",
              index.scalar_type());
  if (index.numel() == 0 || !device_operand_checks_on()) return;
  const auto [lo, hi] = torch::aminmax(index);
  TORCH_CHECK(lo.item<int64_t>() >= 0 && hi.item<int64_t>() < bound, "equivariant_message: a ", name,
              " index outside [0, ", bound, ")");
}

// Shapes, dtypes, devices and indices (the CPU kernels do not check them one by one).
void check(CT x, CT s, CT w, CT path, CT center, CT neighbor, int64_t n_out) {
  TORCH_CHECK(x.dim() == 3, "equivariant_message: x (N, A, C) expected, got ", x.sizes());
  const int64_t N = x.size(0), A = x.size(1), C = x.size(2);
  TORCH_CHECK(s.dim() == 3 && s.size(1) == A, "equivariant_message: s (E, A, K) with A = ", A, " expected, got ",
              s.sizes());
  const int64_t E = s.size(0), K = s.size(2);
  TORCH_CHECK(w.dim() == 3 && w.size(0) == E && w.size(2) == C, "equivariant_message: w (E, P, C) with E = ", E,
              ", C = ", C, " expected, got ", w.sizes());
  TORCH_CHECK(n_out >= 0, "equivariant_message: n_out must be >= 0");
  for (CT t : {s, w})
    TORCH_CHECK(t.scalar_type() == x.scalar_type(), "equivariant_message: x, s and w must have one dtype");
  TORCH_CHECK(x.scalar_type() == torch::kFloat64 || x.scalar_type() == torch::kFloat32,
              "equivariant_message: float32 or float64 expected");
  for (CT t : {s, w, path, center, neighbor})
    TORCH_CHECK(t.device() == x.device(), "equivariant_message: all tensors must be on one device");
  check_index("path", path, K, w.size(1));
  check_index("center", center, E, n_out);
  check_index("neighbor", neighbor, E, N);
}

template <typename T> Operands<T> operands_of(CT x, CT s, CT w, CT path, CT center, CT neighbor) {
  return {x.size(1),         x.size(2),         s.size(2),           w.size(1),
          x.data_ptr<T>(),   s.data_ptr<T>(),   w.data_ptr<T>(),     path.data_ptr<int64_t>(),
          center.data_ptr<int64_t>(), neighbor.data_ptr<int64_t>()};
}

// Threads: each node's sum stays in one thread and in edge order, so results are bitwise those of
// one thread whatever the thread count. The forward groups edges by centre (a stable counting
// sort) and splits the groups between LibTorch's threads.
struct Groups {
  std::vector<int64_t> edges, first;  // the edges of node v: edges[first[v] .. first[v + 1])
};

Groups group_edges(const int64_t* node, int64_t n_edges, int64_t n_nodes) {
  Groups g;
  g.first.assign(n_nodes + 1, 0);
  for (int64_t e = 0; e < n_edges; ++e) ++g.first[node[e] + 1];
  for (int64_t v = 0; v < n_nodes; ++v) g.first[v + 1] += g.first[v];
  g.edges.resize(n_edges);
  std::vector<int64_t> next(g.first.begin(), g.first.end() - 1);
  for (int64_t e = 0; e < n_edges; ++e) g.edges[next[node[e]]++] = e;
  return g;
}

bool threaded(int64_t n_edges) { return at::get_num_threads() > 1 && !at::in_parallel_region() && n_edges >= 256; }

// fn(edges, count) on the groups' edges, split between threads in node ranges of about equal edges.
template <typename Fn> void for_groups(const Groups& g, Fn fn) {
  const int64_t n_nodes = int64_t(g.first.size()) - 1, n_edges = g.first.back();
  const int64_t parts = 4 * at::get_num_threads();
  auto node_at = [&](int64_t p) {  // the first node whose edges start at or after part p's share
    if (p >= parts) return n_nodes;
    return int64_t(std::lower_bound(g.first.begin(), g.first.end() - 1, p * n_edges / parts) - g.first.begin());
  };
  at::parallel_for(0, parts, 1, [&](int64_t p0, int64_t p1) {
    const int64_t v0 = node_at(p0), v1 = node_at(p1);
    if (v1 > v0) fn(g.edges.data() + g.first[v0], g.first[v1] - g.first[v0]);
  });
}

// The operands are checked and contiguous from here on.
Tensor message_cpu(CT x, CT s, CT w, CT path, CT center, CT neighbor, int64_t n_out) {
  Tensor msg = torch::zeros({n_out, s.size(2), x.size(2)}, x.options());
  const int64_t E = s.size(0);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "equivariant_message", [&] {
    const auto o = operands_of<scalar_t>(x, s, w, path, center, neighbor);
    if (!threaded(E)) return message_kernel(o, nullptr, E, msg.data_ptr<scalar_t>());
    for_groups(group_edges(o.center, E, n_out),
               [&](const int64_t* edges, int64_t n) { message_kernel(o, edges, n, msg.data_ptr<scalar_t>()); });
  });
  return msg;
}

// The device kernels (equivariant_message_elements.h) and the tables their sums walk: edges by
// centre (the forward), by neighbour and outputs by path (the backward), on the operands' device.
struct Tables {
  Tensor by_center, center_first, by_neighbor, neighbor_first, by_path, path_first;
};

template <typename T>
kernels::MessageArgs<T> device_args(CT x, CT s, CT w, const T* g, CT path, CT center, CT neighbor, const Tables& t) {
  auto p = [](CT v) { return v.defined() ? v.data_ptr<int64_t>() : nullptr; };
  return {x.size(1),          x.size(2),        s.size(2),          w.size(1),          x.data_ptr<T>(),
          s.data_ptr<T>(),    w.data_ptr<T>(),  g,                  p(path),            p(center),
          p(neighbor),        p(t.by_center),   p(t.center_first),  p(t.by_neighbor),   p(t.neighbor_first),
          p(t.by_path),       p(t.path_first)};
}

Tensor message_device(CT x, CT s, CT w, CT path, CT center, CT neighbor, int64_t n_out) {
  Tables t;
  std::tie(t.by_center, t.center_first) = detail::grouped_by(center, n_out);
  Tensor msg = torch::empty({n_out, s.size(2), x.size(2)}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "equivariant_message", [&] {
    const auto o = device_args<scalar_t>(x, s, w, nullptr, path, center, neighbor, t);
    detail::run_elements(kernels::MessageForward<scalar_t>{o, msg.data_ptr<scalar_t>()}, msg.numel(), x.device());
  });
  return msg;
}

std::vector<Tensor> gradients_device(CT g, CT x, CT s, CT w, CT path, CT center, CT neighbor, int64_t need) {
  Tables t;
  std::tie(t.by_neighbor, t.neighbor_first) = detail::grouped_by(neighbor, x.size(0));
  std::tie(t.by_path, t.path_first) = detail::grouped_by(path, w.size(1));
  const auto none = torch::empty({0}, x.options());
  Tensor gx = need & kNeedX ? torch::empty_like(x) : none, gs = need & kNeedS ? torch::empty_like(s) : none,
         gw = need & kNeedW ? torch::empty_like(w) : none;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "equivariant_message_backward", [&] {
    const auto o = device_args<scalar_t>(x, s, w, g.data_ptr<scalar_t>(), path, center, neighbor, t);
    if (need & kNeedX)
      detail::run_elements(kernels::MessageGradX<scalar_t>{o, gx.data_ptr<scalar_t>()}, gx.numel(), x.device());
    if (need & kNeedS)
      detail::run_elements(kernels::MessageGradS<scalar_t>{o, gs.data_ptr<scalar_t>()}, gs.numel(), x.device());
    if (need & kNeedW)
      detail::run_elements(kernels::MessageGradW<scalar_t>{o, gw.data_ptr<scalar_t>()}, gw.numel(), x.device());
  });
  return {gx, gs, gw};
}

// The gradients of x, s and w with aten operations (the CUDA formulation).
std::vector<Tensor> gradients_reference(CT g, CT x, CT s, CT w, CT path, CT center, CT neighbor, int64_t need) {
  const Tensor xs = x.index_select(0, neighbor);                 // (E, A, C)
  const Tensor gm = g.index_select(0, center);                   // (E, K, C)
  const Tensor t = gm * w.index_select(1, path);                 // (E, K, C)
  const auto none = torch::empty({0}, x.options());
  return {need & kNeedX ? torch::zeros_like(x).index_add(0, neighbor, torch::bmm(s, t)) : none,
          need & kNeedS ? torch::bmm(xs, t.transpose(1, 2)) : none,
          need & kNeedW ? torch::zeros_like(w).index_add(1, path, gm * torch::bmm(s.transpose(1, 2), xs)) : none};
}

std::vector<Tensor> gradients_cpu(CT g, CT x, CT s, CT w, CT path, CT center, CT neighbor, int64_t need) {
  const auto none = torch::empty({0}, x.options());
  Tensor gx = need & kNeedX ? torch::zeros_like(x) : none, gs = need & kNeedS ? torch::empty_like(s) : none,
         gw = need & kNeedW ? torch::empty_like(w) : none;
  const int64_t E = s.size(0), N = x.size(0), A = x.size(1), C = x.size(2);
  // Edges in blocks whose shares of gx (A x C each) stay in cache: the edges' gradients and shares
  // split between threads by edges, then the shares added into gx by neighbour ranges in edge
  // order, so every sum has one order whatever the number of threads.
  // (Results do not depend on the block: a small one on one thread keeps the shares in L1.)
  const int64_t block = at::get_num_threads() == 1
                            ? 16
                            : std::max<int64_t>(64, (int64_t(1) << 20) / (A * C * int64_t(x.element_size())));
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "equivariant_message_backward", [&] {
    const auto o = operands_of<scalar_t>(x, s, w, path, center, neighbor);
    const scalar_t* gp = g.data_ptr<scalar_t>();
    scalar_t *gxp = gx.data_ptr<scalar_t>(), *gsp = gs.data_ptr<scalar_t>(), *gwp = gw.data_ptr<scalar_t>();
    std::vector<scalar_t> cx(need & kNeedX ? std::min(block, E) * A * C : 0);
    for (int64_t b0 = 0; b0 < E; b0 += block) {
      const int64_t b1 = std::min(E, b0 + block);
      at::parallel_for(b0, b1, 16, [&](int64_t e0, int64_t e1) {
        std::vector<scalar_t> scratch(s.size(2) * C);
        edge_gradient_kernel(need, o, e0, e1, gp, gsp, gwp, cx.data() + (e0 - b0) * A * C, scratch.data());
      });
      if (need & kNeedX)
        at::parallel_for(0, N, 1, [&](int64_t j0, int64_t j1) { add_shares_kernel(o, b0, b1, j0, j1, cx.data(), gxp); });
    }
  });
  return {gx, gs, gw};
}

const auto& message_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::equivariant_message", "")
                             .typed<Tensor(CT, CT, CT, CT, CT, CT, int64_t)>();
  return op;
}

const auto& gradients_op() {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::equivariant_message_backward", "")
                             .typed<std::vector<Tensor>(CT, CT, CT, CT, CT, CT, CT, int64_t)>();
  return op;
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The message is trilinear in (x, s, w), so its backward G(g, x, s, w) -> (gx, gs, gw) is too, and
// the backward of G is G and the forward again with one operand substituted: along (hx, hs, hw),
//   d/dg = msg(hx, s, w) + msg(x, hs, w) + msg(x, s, hw),
//   d/dx = G_x(g, x, hs, w) + G_x(g, x, s, hw),  d/ds = G_s(g, hx, s, w) + G_s(g, x, s, hw),
//   d/dw = G_w(g, hx, s, w) + G_w(g, x, hs, w).
// Both through the dispatcher: kernels on the CPU, derivatives of any order.
class EquivariantMessage : public torch::autograd::Function<EquivariantMessage> {
 public:
  static variable_list forward(AutogradContext* ctx, CT x, CT s, CT w, CT path, CT center, CT neighbor,
                               int64_t n_out) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({x, s, w, path, center, neighbor});
    return {message_op().call(x, s, w, path, center, neighbor, n_out)};
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const auto v = ctx->get_saved_variables();
    const OperandsCheckedByForward checked;   // the forward checked the indices: no device reads again
    if (!grad[0].defined()) return {{}, {}, {}, {}, {}, {}, {}};
    // only the gradients asked for (MD: the first layer's features need none)
    const int64_t need = (ctx->needs_input_grad(0) ? kNeedX : 0) | (ctx->needs_input_grad(1) ? kNeedS : 0) |
                         (ctx->needs_input_grad(2) ? kNeedW : 0);
    if (need == 0) return {{}, {}, {}, {}, {}, {}, {}};
    auto g = gradients_op().call(grad[0], v[0], v[1], v[2], v[3], v[4], v[5], need);
    auto given = [&](int i, int64_t bit) { return need & bit ? g[i] : Tensor(); };
    return {given(0, kNeedX), given(1, kNeedS), given(2, kNeedW), {}, {}, {}, {}};
  }
};

// The backward as a function of (g, x, s, w), its outputs those of `need` (the others empty).
class EquivariantMessageBackward : public torch::autograd::Function<EquivariantMessageBackward> {
 public:
  static variable_list forward(AutogradContext* ctx, CT g, CT x, CT s, CT w, CT path, CT center, CT neighbor,
                               int64_t need) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    ctx->save_for_backward({g, x, s, w, path, center, neighbor});
    ctx->saved_data["need"] = need;
    return gradients_op().call(g, x, s, w, path, center, neighbor, need);
  }
  static variable_list backward(AutogradContext* ctx, variable_list h) {
    const auto v = ctx->get_saved_variables();
    const OperandsCheckedByForward checked;   // the forward checked the indices: no device reads again
    const Tensor &g = v[0], &x = v[1], &s = v[2], &w = v[3], &path = v[4], &center = v[5], &neighbor = v[6];
    const int64_t need = ctx->saved_data["need"].toInt();
    auto along = [&](int i, int64_t bit) { return need & bit && h[i].defined() && h[i].numel() ? h[i] : Tensor(); };
    const Tensor hx = along(0, kNeedX), hs = along(1, kNeedS), hw = along(2, kNeedW);
    // what each of the other operands' derivatives asks of the terms below
    const int64_t want = (ctx->needs_input_grad(1) ? kNeedX : 0) | (ctx->needs_input_grad(2) ? kNeedS : 0) |
                         (ctx->needs_input_grad(3) ? kNeedW : 0);
    Tensor dg, dx, ds, dw;
    auto add = [](Tensor& sum, const Tensor& t) { sum = sum.defined() ? sum + t : t; };
    auto term = [&](CT xa, CT sa, CT wa, int64_t bits) {  // d/dg's term, and the gradients of `bits`
      if (ctx->needs_input_grad(0)) add(dg, message_op().call(xa, sa, wa, path, center, neighbor, g.size(0)));
      const int64_t n = bits & want;
      if (n == 0) return;
      const auto r = gradients_op().call(g, xa, sa, wa, path, center, neighbor, n);
      if (n & kNeedX) add(dx, r[0]);
      if (n & kNeedS) add(ds, r[1]);
      if (n & kNeedW) add(dw, r[2]);
    };
    if (hx.defined()) term(hx, s, w, kNeedS | kNeedW);
    if (hs.defined()) term(x, hs, w, kNeedX | kNeedW);
    if (hw.defined()) term(x, s, hw, kNeedX | kNeedS);
    return {dg, dx, ds, dw, {}, {}, {}, {}};
  }
};

std::vector<Tensor> gradients_autograd(CT g, CT x, CT s, CT w, CT path, CT center, CT neighbor, int64_t need) {
  return EquivariantMessageBackward::apply(g, x, s, w, path, center, neighbor, need);
}

Tensor message_autograd(CT x, CT s, CT w, CT path, CT center, CT neighbor, int64_t n_out) {
  return EquivariantMessage::apply(x, s, w, path, center, neighbor, n_out)[0];
}

// The operators' entries on every device: the checks, then the path (mlip/ops/operators.h's
// KernelChoice) on contiguous operands.
Tensor message_entry(CT x, CT s, CT w, CT path, CT center, CT neighbor, int64_t n_out) {
  check(x, s, w, path, center, neighbor, n_out);
  const auto how = detail::kernel_path(x.device());
  if (how == detail::KernelPath::aten) return equivariant_message_reference(x, s, w, path, center, neighbor, n_out);
  const auto run = how == detail::KernelPath::cpu_kernels ? message_cpu : message_device;
  return run(x.contiguous(), s.contiguous(), w.contiguous(), path.contiguous(), center.contiguous(),
             neighbor.contiguous(), n_out);
}

std::vector<Tensor> gradients_entry(CT g, CT x, CT s, CT w, CT path, CT center, CT neighbor, int64_t need) {
  TORCH_CHECK(need >= 0 && need <= kNeedAll, "equivariant_message_backward: need must be a mask of 1, 2 and 4");
  TORCH_CHECK(g.dim() == 3 && x.dim() == 3 && s.dim() == 3 && g.size(1) == s.size(2) && g.size(2) == x.size(2) &&
                  g.scalar_type() == x.scalar_type() && g.device() == x.device(),
              "equivariant_message_backward: g (n_out, K, C) of x's dtype and device expected, got ", g.sizes());
  check(x, s, w, path, center, neighbor, g.size(0));
  const auto how = detail::kernel_path(x.device());
  if (how == detail::KernelPath::aten) return gradients_reference(g, x, s, w, path, center, neighbor, need);
  const auto run = how == detail::KernelPath::cpu_kernels ? gradients_cpu : gradients_device;
  return run(g.contiguous(), x.contiguous(), s.contiguous(), w.contiguous(), path.contiguous(), center.contiguous(),
             neighbor.contiguous(), need);
}

}  // namespace

Tensor equivariant_message_reference(CT x, CT s, CT w, CT path, CT center, CT neighbor, int64_t n_out) {
  const Tensor m = torch::bmm(s.transpose(1, 2), x.index_select(0, neighbor));   // (E, K, C)
  return torch::zeros({n_out, s.size(2), x.size(2)}, x.options()).index_add(0, center, m * w.index_select(1, path));
}

Tensor equivariant_message(CT x, CT s, CT w, CT path, CT center, CT neighbor, int64_t n_out) {
  return message_op().call(x, s, w, path, center, neighbor, n_out);
}

void link_equivariant_message_operator() {}

}  // namespace mlip

TORCH_LIBRARY_FRAGMENT(mlip, m) {
  m.def("equivariant_message(Tensor x, Tensor s, Tensor w, Tensor path, Tensor center, Tensor neighbor, int n_out) "
        "-> Tensor");
  m.def("equivariant_message_backward(Tensor g, Tensor x, Tensor s, Tensor w, Tensor path, Tensor center, "
        "Tensor neighbor, int need=7) -> Tensor[]");
}
TORCH_LIBRARY_IMPL(mlip, CPU, m) {
  m.impl("equivariant_message", &mlip::message_entry);
  m.impl("equivariant_message_backward", &mlip::gradients_entry);
}
TORCH_LIBRARY_IMPL(mlip, CUDA, m) {
  m.impl("equivariant_message", &mlip::message_entry);
  m.impl("equivariant_message_backward", &mlip::gradients_entry);
}
TORCH_LIBRARY_IMPL(mlip, Autograd, m) {
  m.impl("equivariant_message", &mlip::message_autograd);
  m.impl("equivariant_message_backward", &mlip::gradients_autograd);
}
