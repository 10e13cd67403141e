// torch.ops.mlip.tanh_net: see mlip/ops/radial_net.h.
#include "mlip/ops/radial_net.h"

#include <algorithm>
#include <vector>

#include <ATen/Dispatch.h>
#include <c10/util/Exception.h>
#include <torch/autograd.h>
#include <torch/library.h>

#include "device_launch.h"
#include "radial_net_elements.h"

namespace mlip {
namespace {

using torch::Tensor;

constexpr int64_t kBlockRows = 512;   // rows per block on the CPU: a layer's arrays stay in L2

struct Layer {
  Tensor w, b, w2, b2;   // W, b and (`doubled` only) 2 W, 2 b (tanh(z) = 2 sigmoid(2 z) - 1: sigmoid costs a third of tanh)
  int64_t residual = 0, in = 1, out = 1;
};

// The layers of `params`, checked; with `doubled`, 2 W and 2 b too (the ATen formulation's forward:
// two kernels a layer on a GPU that nothing else needs).
std::vector<Layer> layers_of(const Tensor& x, at::TensorList params, at::IntArrayRef residual, bool doubled) {
  TORCH_CHECK(x.dim() == 1, "tanh_net: x (E,) expected, got ", x.sizes());
  TORCH_CHECK(!residual.empty() && params.size() == 2 * residual.size(),
              "tanh_net: params must be [W_0, b_0, W_1, b_1, ...], one pair per entry of residual (",
              residual.size(), " entries, ", params.size(), " params)");
  std::vector<Layer> layers;
  int64_t width = 1;
  for (std::size_t l = 0; l < residual.size(); ++l) {
    const Tensor &w = params[2 * l], &b = params[2 * l + 1];
    TORCH_CHECK(w.dim() == 2 && w.size(0) == width && b.dim() == 1 && b.size(0) == w.size(1), "tanh_net: layer ", l,
                ": W (", width, ", out) and b (out) expected, got ", w.sizes(), " and ", b.sizes());
    TORCH_CHECK(w.scalar_type() == x.scalar_type() && b.scalar_type() == x.scalar_type() && w.device() == x.device() &&
                    b.device() == x.device(),
                "tanh_net: layer ", l, ": W and b must have x's dtype and device");
    const int64_t out = w.size(1), r = residual[l];
    TORCH_CHECK(r == 0 || (r == 1 && out == width) || (r == 2 && out == 2 * width), "tanh_net: layer ", l,
                ": residual ", r, " does not fit widths ", width, " -> ", out);
    layers.push_back({w.detach(), b.detach(), doubled ? 2 * w.detach() : Tensor(), doubled ? 2 * b.detach() : Tensor(), r,
                      width, out});
    width = out;
  }
  return layers;
}

// dst = R_l(y) + alpha a, without building R_l(y) (R_l: none, y, or [y, y]).
void skip_add_out(Tensor dst, const Tensor& y, const Tensor& a, const Layer& layer, double alpha) {
  if (layer.residual == 2) {
    const int64_t n = a.size(0);
    Tensor d = dst.view({n, 2, layer.in});
    at::add_out(d, y.unsqueeze(1), a.view({n, 2, layer.in}), alpha);
  } else if (layer.residual == 1) {
    at::add_out(dst, y, a, alpha);
  } else {
    dst.copy_(a);
    if (alpha != 1.0) dst.mul_(alpha);
  }
}

// The transpose of R_l applied to a gradient (undefined: none, or no gradient).
Tensor skip_transposed(const Tensor& g, const Layer& layer) {
  if (!g.defined() || layer.residual == 0) return {};
  if (layer.residual == 1) return g;
  return g.view({g.size(0), 2, layer.in}).sum(1);
}

// out = base + g W^T (base undefined: none).
Tensor add_back(const Tensor& base, const Tensor& g, const Tensor& w) {
  return base.defined() ? at::addmm(base, g, w.t()) : at::mm(g, w.t());
}

// What the reverse pass needs, per layer, for every row: the layer's input y_l and dy_l/dx, its
// tanh a_l and dz_l/dx. The forward writes them in place (no copies). `stacked` (the device
// kernel's): y_l holds [y_l; dy_l/dx] (2 E, in_l) and yd is empty.
struct Saved {
  std::vector<Tensor> y, yd, a, zd;
  bool stacked = false;
};

Saved allocate_saved(const std::vector<Layer>& layers, const Tensor& x) {
  Saved s;
  const int64_t rows = x.size(0);
  for (const Layer& l : layers) {
    const bool first = s.y.empty();
    s.y.push_back(first ? x.unsqueeze(1) : torch::empty({rows, l.in}, x.options()));
    s.yd.push_back(first ? torch::ones({rows, 1}, x.options()) : torch::empty({rows, l.in}, x.options()));
    s.a.push_back(torch::empty({rows, l.out}, x.options()));
    s.zd.push_back(torch::empty({rows, l.out}, x.options()));
  }
  return s;
}

// Rows [r0, r0 + n) through all layers, value and derivative together.
void forward_block(const Tensor& x, const std::vector<Layer>& layers, int64_t r0, int64_t n, Tensor& out,
                   Tensor& out_d, Saved* saved) {
  auto place = [&](std::vector<Tensor> Saved::*member, std::size_t l, int64_t width) {
    return saved != nullptr ? ((*saved).*member)[l].narrow(0, r0, n) : torch::empty({n, width}, x.options());
  };
  Tensor y = x.narrow(0, r0, n).unsqueeze(1);
  Tensor yd = torch::ones({n, 1}, x.options());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const Layer& L = layers[l];
    Tensor a = place(&Saved::a, l, L.out);
    if (l == 0) {
      at::addcmul_out(a, L.b2, y, L.w2);
    } else {
      at::addmm_out(a, L.b2, y, L.w2);
    }
    a.sigmoid_().mul_(2).sub_(1);                                   // tanh(z) = 2 sigmoid(2 z) - 1
    Tensor zd = l == 0 && saved == nullptr ? L.w.expand({n, L.out}) : place(&Saved::zd, l, L.out);
    if (l == 0 && saved != nullptr) zd.copy_(L.w.expand({n, L.out}));
    if (l > 0) at::mm_out(zd, yd, L.w);                             // dz/dx
    Tensor ad = a * a;
    ad.sub_(1).mul_(zd);                                            // -(dtanh/dz) dz/dx
    const bool last = l + 1 == layers.size();
    Tensor y_next = last ? out.narrow(0, r0, n) : place(&Saved::y, l + 1, L.out);
    Tensor yd_next = last ? out_d.narrow(0, r0, n) : place(&Saved::yd, l + 1, L.out);
    skip_add_out(y_next, y, a, L, 1.0);
    skip_add_out(yd_next, yd, ad, L, -1.0);
    y = y_next;
    yd = yd_next;
  }
}

// Rows in blocks of kBlockRows on the CPU (one thread: at::parallel_for would run serially in a
// file built without OpenMP, and threads would need ATen's thread-local state), one block on
// other devices, and on the CPU where the ATen formulations are asked for (MLIP_KERNELS=aten: the
// operators a GPU runs, as a CPU profile of them counts).
template <typename F> void for_blocks(const Tensor& x, F&& body) {
  const int64_t rows = x.size(0);
  if (!x.is_cpu() || detail::kernel_path(x.device()) == detail::KernelPath::aten) return body(0, rows);
  for (int64_t r = 0; r < rows; r += kBlockRows) body(r, std::min(kBlockRows, rows - r));
}

// The device kernel takes nets of at most kTanhNetMaxLayers layers of at most kTanhNetMaxWidth.
bool fits_the_kernel(const std::vector<Layer>& layers) {
  return layers.size() <= kernels::kTanhNetMaxLayers &&
         std::all_of(layers.begin(), layers.end(), [](const Layer& l) { return l.out <= kernels::kTanhNetMaxWidth; });
}

// Whether the device kernels run here: tanh_net's have no tables (no sort), so a CUDA graph's
// recording, which takes the ATen formulations for the operators with tables, takes them too.
bool device_kernels_here(const Tensor& x, const std::vector<Layer>& layers) {
  return x.size(0) > 0 && fits_the_kernel(layers) &&
         detail::kernel_path_without_tables(x.device()) == detail::KernelPath::device_kernels;
}

// The forward by the device kernel (radial_net_elements.h): one row per element, keeping what the
// backward reads where `saved` (stacked) is given.
template <typename T>
void forward_elements(const Tensor& x, const std::vector<Layer>& layers, Tensor& out, Tensor& out_d, Saved* saved) {
  kernels::TanhNetArgs<T> o{};
  o.x = x.data_ptr<T>();
  o.layers = static_cast<int>(layers.size());
  for (std::size_t l = 0; l < layers.size(); ++l) {
    o.w[l] = layers[l].w.data_ptr<T>();
    o.b[l] = layers[l].b.data_ptr<T>();
    o.in[l] = static_cast<int>(layers[l].in);
    o.out[l] = static_cast<int>(layers[l].out);
    o.residual[l] = static_cast<int>(layers[l].residual);
  }
  kernels::TanhNetSaved<T> keep{};
  keep.rows = x.size(0);
  if (saved != nullptr) {
    for (std::size_t l = 0; l < layers.size(); ++l) {
      keep.inputs[l] = saved->y[l].data_ptr<T>();
      keep.tanh[l] = saved->a[l].data_ptr<T>();
      keep.z_dx[l] = saved->zd[l].data_ptr<T>();
    }
  }
  detail::run_elements(kernels::TanhNetForward<T>{o, out.data_ptr<T>(), out_d.data_ptr<T>(), keep}, x.size(0), x.device());
}

Saved allocate_stacked(const std::vector<Layer>& layers, const Tensor& x) {
  Saved s;
  s.stacked = true;
  const int64_t rows = x.size(0);
  for (const Layer& l : layers) {
    s.y.push_back(torch::empty({2 * rows, l.in}, x.options()));
    s.a.push_back(torch::empty({rows, l.out}, x.options()));
    s.zd.push_back(torch::empty({rows, l.out}, x.options()));
  }
  return s;
}

std::tuple<Tensor, Tensor> run_forward(const Tensor& x_in, at::TensorList params, at::IntArrayRef residual, Saved* saved) {
  std::vector<Layer> layers = layers_of(x_in, params, residual, /*doubled=*/false);
  const Tensor x = x_in.detach().contiguous();
  const int64_t m = layers.back().out;
  Tensor out = torch::empty({x.size(0), m}, x.options()), out_d = torch::empty({x.size(0), m}, x.options());
  if (device_kernels_here(x, layers)) {
    std::vector<Layer> contiguous = layers;
    for (Layer& l : contiguous) l.w = l.w.contiguous(), l.b = l.b.contiguous();
    if (saved != nullptr) *saved = allocate_stacked(layers, x);
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "tanh_net", [&] { forward_elements<scalar_t>(x, contiguous, out, out_d, saved); });
    return {out, out_d};
  }
  layers = layers_of(x, params, residual, /*doubled=*/true);
  if (saved != nullptr) *saved = allocate_saved(layers, x);
  if (x.size(0) > 0) {
    for_blocks(x, [&](int64_t r0, int64_t n) { forward_block(x, layers, r0, n, out, out_d, saved); });
  }
  return {out, out_d};
}

// Parameter gradients from dL/dy_L and dL/d(dy_L/dx) (either may be undefined), layer by layer
// in reverse, block by block.
std::vector<Tensor> parameter_gradients(const std::vector<Layer>& layers, const Saved& s, const Tensor& x,
                                        const Tensor& g_out, const Tensor& gd_out) {
  std::vector<Tensor> acc;
  for (const Layer& L : layers) {
    acc.push_back(torch::zeros_like(L.w));
    acc.push_back(torch::zeros_like(L.b));
  }
  for_blocks(x, [&](int64_t r0, int64_t n) {
    Tensor gy = g_out.defined() ? g_out.narrow(0, r0, n) : Tensor();
    Tensor gyd = gd_out.defined() ? gd_out.narrow(0, r0, n) : Tensor();
    for (std::size_t l = layers.size(); l-- > 0;) {
      const Layer& L = layers[l];
      const Tensor a = s.a[l].narrow(0, r0, n), aa = a * a;         // dtanh/dz = 1 - aa
      Tensor ga = gy, gzd;
      if (gyd.defined()) {
        gzd = at::addcmul(gyd, gyd, aa, -1);                        // y'_{l+1} = R(y'_l) + (1 - aa) zd
        Tensor t = gyd * s.zd[l].narrow(0, r0, n);
        t.mul_(a);
        ga = gy.defined() ? at::add(gy, t, -2) : t.mul_(-2);        // through 1 - aa
      }
      if (!ga.defined()) ga = torch::zeros_like(a);
      const Tensor gz = at::addcmul(ga, ga, aa, -1);
      Tensor& gw = acc[2 * l];
      gw.addmm_(s.y[l].narrow(0, r0, n).t(), gz);
      acc[2 * l + 1].add_(gz.sum(0));
      if (gzd.defined()) gw.addmm_(s.yd[l].narrow(0, r0, n).t(), gzd);
      if (l == 0) break;
      gy = add_back(skip_transposed(gy, L), gz, L.w);
      if (gzd.defined()) gyd = add_back(skip_transposed(gyd, L), gzd, L.w);
    }
  });
  return acc;
}

// The same from the device kernel's stacked values: per layer one elementwise kernel
// (TanhNetLayerBackward), W's gradient one matrix product of the stacked inputs, b's a sum, and the
// input's gradients [g_y; g_yd] one more.
std::vector<Tensor> stacked_gradients(const std::vector<Layer>& layers, const Saved& s, const Tensor& x,
                                      const Tensor& g_out, const Tensor& gd_out) {
  const int64_t n = x.size(0), m = layers.back().out;
  const auto zeros = [&] { return torch::zeros({n, m}, x.options()); };
  Tensor g = torch::cat({g_out.defined() ? g_out : zeros(), gd_out.defined() ? gd_out : zeros()});
  std::vector<Tensor> acc(2 * layers.size());
  for (std::size_t l = layers.size(); l-- > 0;) {
    const Layer& L = layers[l];
    const Tensor gz = torch::empty({2 * n, L.out}, x.options());
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "tanh_net_backward", [&] {
      const kernels::TanhNetLayerArgs<scalar_t> o{g.data_ptr<scalar_t>(), s.a[l].data_ptr<scalar_t>(),
                                                  s.zd[l].data_ptr<scalar_t>(), n * L.out};
      detail::run_elements(kernels::TanhNetLayerBackward<scalar_t>{o, gz.data_ptr<scalar_t>()}, n * L.out, x.device());
    });
    acc[2 * l] = at::mm(s.y[l].t(), gz);
    acc[2 * l + 1] = gz.narrow(0, 0, n).sum(0);
    if (l == 0) break;
    // g and R_l^T g are this loop's own tensors (never the incoming gradients): the product is
    // added in place (an addmm into a new tensor copies its base first, a kernel more a layer).
    Tensor base = skip_transposed(g, L);
    g = base.defined() ? base.addmm_(gz, L.w.t()) : at::mm(gz, L.w.t());
  }
  return acc;
}

std::tuple<Tensor, Tensor> tanh_net_plain(const Tensor& x, at::TensorList params, at::IntArrayRef residual) {
  return run_forward(x, params, residual, nullptr);
}

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

class TanhNet : public torch::autograd::Function<TanhNet> {
 public:
  // train: keep what the parameters' gradients need (grad mode on and a parameter requires grad).
  static variable_list forward(AutogradContext* ctx, const Tensor& x, at::TensorList params,
                               at::IntArrayRef residual, bool train) {
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    auto saved = std::make_shared<Saved>();
    auto [out, out_d] = run_forward(x, params, residual, train ? saved.get() : nullptr);
    std::vector<Tensor> to_save{out_d, x};
    to_save.insert(to_save.end(), params.begin(), params.end());
    ctx->save_for_backward(to_save);
    ctx->set_materialize_grads(false);   // an unused output's gradient stays undefined, not zeros
    ctx->saved_data["residual"] = residual.vec();
    ctx->saved_data["train"] = train;
    if (train) {
      c10::List<Tensor> keep;
      for (auto* v : {&saved->y, &saved->yd, &saved->a, &saved->zd})
        for (const Tensor& t : *v) keep.push_back(t);
      ctx->saved_data["values"] = keep;
      ctx->saved_data["stacked"] = saved->stacked;
    }
    return {out, out_d};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad) {
    const variable_list s = ctx->get_saved_variables();
    const Tensor &out_d = s[0], &x = s[1];
    const std::vector<Tensor> params(s.begin() + 2, s.end());
    variable_list result(params.size() + 3);   // x, params, residual, train
    if (ctx->needs_input_grad(0)) {
      TORCH_CHECK(!grad[1].defined(), "tanh_net: a gradient with respect to x through dy/dx needs the net's second "
                  "derivative, which this operator does not compute (a loss on forces: call backward with "
                  "inputs = the parameters)");
      if (grad[0].defined()) result[0] = (grad[0] * out_d).sum(1);   // differentiable: forces of a force loss
    }
    bool any_parameter = false;
    for (std::size_t k = 0; k < params.size(); ++k) any_parameter = any_parameter || ctx->needs_input_grad(k + 1);
    if (!any_parameter) return result;
    TORCH_CHECK(ctx->saved_data["train"].toBool(), "tanh_net: parameter gradients asked for, but no parameter "
                "required grad in the forward");
    TORCH_CHECK(!at::GradMode::is_enabled(), "tanh_net: parameter gradients are first-order only (no create_graph)");
    const std::vector<int64_t> residual = ctx->saved_data["residual"].toIntVector();
    const std::vector<Layer> layers = layers_of(x, params, residual, /*doubled=*/false);
    const c10::List<Tensor> kept = ctx->saved_data["values"].toTensorList();
    const std::size_t nl = layers.size();
    Saved saved;
    saved.stacked = ctx->saved_data["stacked"].toBool();
    for (std::size_t k = 0; k < nl; ++k) {
      saved.y.push_back(kept[k]);
      if (!saved.stacked) saved.yd.push_back(kept[nl + k]);
    }
    const std::size_t rest = saved.stacked ? nl : 2 * nl;
    for (std::size_t k = 0; k < nl; ++k) {
      saved.a.push_back(kept[rest + k]);
      saved.zd.push_back(kept[rest + nl + k]);
    }
    const auto contiguous = [](const Tensor& t) { return t.defined() ? t.contiguous() : t; };
    const std::vector<Tensor> g = saved.stacked ? stacked_gradients(layers, saved, x, grad[0], grad[1])
                                                : parameter_gradients(layers, saved, x, contiguous(grad[0]), contiguous(grad[1]));
    for (std::size_t k = 0; k < params.size(); ++k)
      if (ctx->needs_input_grad(k + 1)) result[k + 1] = g[k];
    return result;
  }
};

std::tuple<Tensor, Tensor> tanh_net_autograd(const Tensor& x, at::TensorList params, at::IntArrayRef residual) {
  const bool train = at::GradMode::is_enabled() &&
                     std::any_of(params.begin(), params.end(), [](const Tensor& p) { return p.requires_grad(); });
  const variable_list out = TanhNet::apply(x, params, residual, train);
  return {out[0], out[1]};
}

}  // namespace

std::tuple<Tensor, Tensor> tanh_net(const Tensor& x, at::TensorList params, at::IntArrayRef residual) {
  static const auto op = c10::Dispatcher::singleton()
                             .findSchemaOrThrow("mlip::tanh_net", "")
                             .typed<std::tuple<Tensor, Tensor>(const Tensor&, at::TensorList, at::IntArrayRef)>();
  return op.call(x, params, residual);
}

void link_radial_net_operator() {}

}  // namespace mlip

TORCH_LIBRARY_FRAGMENT(mlip, m) { m.def("tanh_net(Tensor x, Tensor[] params, int[] residual) -> (Tensor, Tensor)"); }

// ATen operations only: the same function on every device.
TORCH_LIBRARY_IMPL(mlip, CPU, m) { m.impl("tanh_net", &mlip::tanh_net_plain); }
TORCH_LIBRARY_IMPL(mlip, CUDA, m) { m.impl("tanh_net", &mlip::tanh_net_plain); }
TORCH_LIBRARY_IMPL(mlip, Autograd, m) { m.impl("tanh_net", &mlip::tanh_net_autograd); }
