// Device choice (mlip/model/device.h), shared by the trainer and the pair style, and the model
// evaluation path on a GPU. Without a GPU the GPU cases are skipped with a "no GPU" line; the
// choice logic and the loading of LibTorch's CUDA backend run on every machine.
#include <gtest/gtest.h>
#include <thread>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/cuda.h>
#include <torch/jit.h>

#include <ATen/Context.h>
#include <ATen/ops/_foreach_add.h>

#include <algorithm>
#include <functional>
#include <cmath>
#include <limits>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <random>
#include <set>
#include <tuple>
#include <stdexcept>
#include <string>
#include <vector>

#include "mlip/model/device.h"
#include "mlip/model/device_graph.h"
#include "mlip/model/device_step.h"
#include "mlip/model/cuda_graph_recorder.h"
#include "mlip/graph/chunk_graph.h"
#include "mlip/model/device_memory.h"
#include "mlip/error.h"
#include "mlip/model/graph_capture.h"
#include "mlip/model/host_reads.h"
#include "mlip/model/kernel_profile.h"
#include "mlip/model/model.h"
#include "mlip/ops/activation.h"
#include "mlip/ops/equivariant_message.h"
#include "mlip/ops/radial_net.h"
#include "mlip/ops/se_environment.h"
#include "mlip/ops/operators.h"
#include "mlip/ops/symmetric_contraction.h"
#include "mlip/ops/tabulated_embedding.h"
#include "../common/src/ops/device_launch.h"
#include "mlip/ops/vector_message.h"
#include "mlip/ops/bessel_radial.h"
#include "mlip/ops/vector_polynomials.h"
#include "support/gpu.h"
#include "support/reference.h"
#include "support/temp_dir.h"
#include "support/test_models.h"

namespace mlip {
namespace {

std::string error_of(const std::string& spec, int local_rank = 0) {
  try {
    choose_device(spec, local_rank, "training.device");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Device, CpuIsAlwaysAvailable) {
  std::string note;
  EXPECT_EQ(choose_device("cpu", 3, "x", &note), torch::Device(torch::kCPU));
  EXPECT_NE(note.find("CPU"), std::string::npos);
}

TEST(Device, UnknownNamesAreErrorsNamingTheSetting) {
  EXPECT_NE(error_of("gpu").find("training.device: unknown device 'gpu' (known: cpu, cuda, cuda:N, auto)"),
            std::string::npos)
      << error_of("gpu");
  EXPECT_NE(error_of("cuda:").find("expected cuda:N"), std::string::npos);
  EXPECT_NE(error_of("cuda:x1").find("expected cuda:N"), std::string::npos);
  EXPECT_NE(error_of("CPU").find("unknown device"), std::string::npos);
}

// A CUDA build of LibTorch (PyPI's): its CUDA backend loads into a process linked with the CPU
// libraries only, and registers its kernels with the ATen already loaded.
TEST(Device, CudaBackendOfACudaLibTorchLoads) {
#if MLIP_TEST_TORCH_HAS_CUDA
  EXPECT_EQ(load_cuda_backend(), "");
  const auto op = c10::Dispatcher::singleton().findSchema({"aten::empty", "memory_format"});
  ASSERT_TRUE(op.has_value());
  EXPECT_TRUE(op->hasKernelForDispatchKey(c10::DispatchKey::CUDA));
  // The driver probe and LibTorch agree on the GPUs (none here).
  EXPECT_EQ(cuda_device_count(), static_cast<int>(torch::cuda::device_count()));
#else
  const std::string why = load_cuda_backend();
  EXPECT_NE(why.find("CPU-only"), std::string::npos) << why;
  EXPECT_EQ(cuda_device_count(), 0);
#endif
}

// LibTorch counts its devices once per process: loading the CUDA backend after a model has run
// on the CPU, or after something asked ATen about CUDA, is refused with the reason (each case in
// a fresh process: a death test re-runs the binary for it).
TEST(Device, LateLoadingOfTheCudaBackendIsRefusedWithTheReason) {
#if MLIP_TEST_TORCH_HAS_CUDA
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto late = [](bool after_model) {
    if (after_model) {
      testing::TempDir dir("mlip_test_device_late");
      testing::write_test_model("morse64", (dir.path / "m.pt").string());
      Model::load((dir.path / "m.pt").string());
    } else {
      at::show_config();
    }
    std::fprintf(stderr, "[%s]\n", load_cuda_backend().c_str());
    std::exit(0);
  };
  EXPECT_EXIT(late(true), ::testing::ExitedWithCode(0), "must be loaded before the process's first model");
  EXPECT_EXIT(late(false), ::testing::ExitedWithCode(0), "had settled on having no CUDA backend");
#else
  GTEST_SKIP() << "a CPU-only LibTorch";
#endif
}

TEST(Device, WithoutAGpuAutoIsTheCpuAndCudaAClearError) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "a GPU is visible: covered by the GPU cases";
  std::string note;
  EXPECT_EQ(choose_device("auto", 0, "pair_style mlip", &note), torch::Device(torch::kCPU));
  EXPECT_NE(note.find("device auto"), std::string::npos) << note;
  const std::string e = error_of("cuda");
  EXPECT_NE(e.find("training.device: device 'cuda' asked for, but no GPU can be used"), std::string::npos) << e;
  EXPECT_NE(error_of("cuda:0").find("no GPU can be used"), std::string::npos);
  EXPECT_EQ(gpu_bus_id(0), "");
}

TEST(Device, GpuPerNodeLocalRank) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const int n = cuda_device_count();
  for (int r = 0; r < 2 * n; ++r) {
    EXPECT_EQ(choose_device("cuda", r, "x"), torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(r % n)));
  }
  EXPECT_EQ(choose_device("auto", 0, "x").type(), torch::kCUDA);
  EXPECT_NE(error_of("cuda:" + std::to_string(n)).find("GPU(s) visible"), std::string::npos);
  // Each visible GPU's PCI bus id (the pair style counts the ranks on one GPU by it): read, and
  // told apart.
  std::set<std::string> buses;
  for (int k = 0; k < n; ++k) buses.insert(gpu_bus_id(k));
  EXPECT_EQ(static_cast<int>(buses.size()), n);
  EXPECT_EQ(buses.count(""), 0u);
  EXPECT_EQ(gpu_bus_id(n), "");
}

// Energies and edge gradients of the same graph on the GPU and on the CPU (float64): the
// evaluation path of the pair style and of `mlip-trainer test` (evaluate_graph copies the graph
// to the model's device and the results back).
class DeviceModels : public ::testing::TestWithParam<const char*> {};

TEST_P(DeviceModels, GpuEqualsCpuInFloat64) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const testing::TempDir dir(std::string("mlip_test_device_") + GetParam());
  const std::string path = (dir.path / "model.pt").string();
  testing::write_test_model(GetParam(), path);
  const Model cpu = Model::load(path);
  const Model gpu = Model::load(path, choose_device("cuda", 0, "test"));
  Structure s;
  s.cell.lattice = {{{6.1, 0, 0}, {0.4, 5.8, 0}, {-0.3, 0.5, 6.3}}};
  s.cell.pbc = {true, true, true};
  std::mt19937 rng(5);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (int i = 0; i < 24; ++i) {
    Vec3 x{};
    for (int d = 0; d < 3; ++d) x[d] = u(rng) * 6.0;
    s.positions.push_back(x);
    s.numbers.push_back(i % 3 == 0 ? 8 : 1);
  }
  const testing::StructureGraph graph(cpu, s);
  const GraphView g = graph.view();
  const ModelOutput a = evaluate_graph(cpu, g), b = evaluate_graph(gpu, g);
  ASSERT_TRUE(b.atom_energy.device().is_cpu());
  const double scale_e = a.atom_energy.abs().max().item<double>(), scale_g = a.edge_grad.abs().max().item<double>();
  const double de = (a.atom_energy - b.atom_energy).abs().max().item<double>() / scale_e;
  const double dg = (a.edge_grad - b.edge_grad).abs().max().item<double>() / scale_g;
  // Read by scripts/gpu-check.sh for its summary.
  std::printf("%s: relative difference GPU vs CPU: energies %.3g, edge gradients (forces) %.3g\n", GetParam(), de, dg);
  EXPECT_LE(de, 1e-8);
  EXPECT_LE(dg, 1e-8);
}

INSTANTIATE_TEST_SUITE_P(Architectures, DeviceModels, ::testing::Values("morse64", "se_e2_a", "painn", "mace"));

Structure random_water_box(unsigned seed, int copies, double jitter) {
  Structure s;
  s.cell.lattice = {{{6.1 * copies, 0, 0}, {0.4, 5.8, 0}, {-0.3, 0.5, 6.3}}};
  s.cell.pbc = {true, true, true};
  std::mt19937 rng(5);   // the same atoms every time, moved by `jitter`
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::mt19937 move(seed);
  std::normal_distribution<double> noise(0.0, jitter);
  for (int i = 0; i < 24 * copies; ++i) {
    Vec3 x{};
    for (int d = 0; d < 3; ++d) x[d] = u(rng) * 6.0 + noise(move);
    x[0] += 6.1 * (i / 24);
    s.positions.push_back(x);
    s.numbers.push_back(i % 3 == 0 ? 8 : 1);
  }
  return s;
}

// CUDA graphs (mlip/model/graph_capture.h): the recorded call, replayed on moved atoms, equals the CPU
// in float64; moved atoms replay the recording, a system twice as large is recorded anew.
TEST(GraphCaptureGpu, ReplaysEqualTheCpu) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const testing::TempDir dir("mlip_test_graph_capture");
  const std::string path = (dir.path / "model.pt").string();
  testing::write_test_model("se_e2_a", path);
  const Model cpu = Model::load(path);
  const Model gpu = Model::load(path, choose_device("cuda", 0, "test"));
  GraphCapture capture(gpu, /*record=*/true);
  int64_t told = 0;   // before_recording's calls: one before each recording
  capture.before_recording([&] { ++told; });
  const std::vector<std::pair<int, double>> steps = {{1, 0.0}, {1, 0.02}, {1, 0.02}, {2, 0.0}, {2, 0.02}};
  std::vector<int64_t> recordings;
  for (std::size_t k = 0; k < steps.size(); ++k) {
    const Structure s = random_water_box(static_cast<unsigned>(k), steps[k].first, steps[k].second);
    const testing::StructureGraph graph(cpu, s);
    const ModelOutput a = evaluate_graph(cpu, graph.view()), b = capture.evaluate(graph.view());
    const double de = (a.atom_energy - b.atom_energy).abs().max().item<double>() / a.atom_energy.abs().max().item<double>();
    const double dg = (a.edge_grad - b.edge_grad).abs().max().item<double>() / a.edge_grad.abs().max().item<double>();
    std::printf("CUDA graph step %zu: %zu atoms, relative difference GPU vs CPU: energies %.3g, edge gradients %.3g; "
                "recorded %lld time(s)\n", k, s.size(), de, dg, static_cast<long long>(capture.recordings()));
    EXPECT_LE(de, 1e-8);
    EXPECT_LE(dg, 1e-8);
    recordings.push_back(capture.recordings());
  }
  EXPECT_EQ(recordings[0], 1);
  EXPECT_EQ(recordings[2], recordings[0]) << "moved atoms were recorded anew";
  EXPECT_EQ(recordings[3], recordings[2] + 1) << "a system twice as large was not recorded anew";
  EXPECT_EQ(told, capture.recordings());
  // A smaller call (the pair style's chunks) replays the larger recording; after forget() it is
  // recorded anew at its own size.
  const Structure small = random_water_box(9, 1, 0.02);
  const testing::StructureGraph graph(cpu, small);
  const ModelOutput a = evaluate_graph(cpu, graph.view());
  for (const bool forget : {false, true}) {
    if (forget) capture.forget();
    const ModelOutput b = capture.evaluate(graph.view());
    EXPECT_LE((a.edge_grad - b.edge_grad).abs().max().item<double>() / a.edge_grad.abs().max().item<double>(), 1e-8);
    EXPECT_EQ(capture.recordings(), recordings[4] + (forget ? 1 : 0)) << (forget ? "after forget()" : "the smaller call");
  }
}

// forget() (the pair style's first measured call, a failed call): the next call's capacity is its
// own, not the larger one held before (unrecorded here, on the CPU: the same grouping).
TEST(GraphCapture, ForgetStartsAtTheNextCallsSize) {
  const testing::TempDir dir("mlip_test_graph_capture_forget");
  const std::string path = (dir.path / "model.pt").string();
  testing::write_test_model("se_e2_a", path);
  const Model cpu = Model::load(path);
  GraphCapture capture(cpu, /*record=*/false);
  const testing::StructureGraph large(cpu, random_water_box(1, 2, 0.0)), small(cpu, random_water_box(2, 1, 0.0));
  const auto edges = [&] { return std::accumulate(capture.capacity().edges.begin(), capture.capacity().edges.end(), int64_t{0}); };
  capture.evaluate(large.view());
  const int64_t held = edges();
  capture.evaluate(small.view());
  EXPECT_EQ(edges(), held) << "a smaller call shrank the capacity";
  capture.forget();
  EXPECT_EQ(edges(), 0);
  const ModelOutput a = evaluate_graph(cpu, small.view()), b = capture.evaluate(small.view());
  EXPECT_GT(edges(), 0);
  EXPECT_LT(edges(), held) << "after forget() the smaller call kept the larger capacity";
  EXPECT_TRUE(torch::allclose(a.edge_grad, b.edge_grad, 1e-12, 1e-14));
}

// A recording that CUDA invalidates (here by a read back to the host inside it) is an error, and
// leaves nothing behind: LibTorch's allocator, which LibTorch leaves recording into the failed
// graph's pool, frees its cache again (an internal assertion before), and the next recording and
// its replay work.
TEST(GraphCaptureGpu, AnInvalidatedRecordingLeavesTheAllocatorUsable) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const torch::Device gpu = choose_device("cuda", 0, "test");
  detail::CudaGraphRecorder recorder(gpu.index());
  const torch::Tensor x = torch::ones({1000}, torch::dtype(torch::kFloat64).device(gpu));
  torch::Tensor y;
  EXPECT_ANY_THROW(recorder.record([&] {
    y = x * 2;
    (void)y.sum().item<double>();
  }));
  EXPECT_TRUE(release_cached_memory()) << "LibTorch's allocator cannot free its cache after the failed recording";
  recorder.record([&] { y = x * 3; });
  recorder.replay_now();
  EXPECT_EQ(y.sum().item<double>(), 3000.0);
  EXPECT_TRUE(release_cached_memory());
}

// PaiNN's and MACE's recorded model call (forward_grouped, forward_grouped_heads with a chosen
// head) replayed on moved atoms equals the CPU in float64: with the operators' ATen formulations
// (what a recording runs) and with their device kernels asked for (not yet the default inside a
// recording: this says whether they record).
TEST(GraphCaptureGpu, MessagePassingReplaysEqualTheCpu) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const testing::TempDir dir("mlip_test_graph_capture_mp");
  const auto rel = [](const torch::Tensor& a, const torch::Tensor& b) {
    return (a - b).abs().max().item<double>() / a.abs().max().item<double>();
  };
  for (const auto& [name, head] : {std::pair{"painn", ""}, {"mace", ""}, {"mace_heads", "c"}}) {
    for (const KernelChoice choice : {KernelChoice::usual, KernelChoice::device_kernels}) {
      SCOPED_TRACE(std::string(name) + (choice == KernelChoice::usual ? ", usual kernels" : ", device kernels"));
      const std::string path = (dir.path / (std::string(name) + ".pt")).string();
      testing::write_test_model(name, path);
      Model cpu = Model::load(path), gpu = Model::load(path, choose_device("cuda", 0, "test"));
      if (*head != '\0') {
        cpu.select_head(head);
        gpu.select_head(head);
      }
      const KernelChoiceScope kernels(choice);
      GraphCapture capture(gpu, /*record=*/true);
      for (unsigned k = 0; k < 3; ++k) {
        const Structure s = random_water_box(k, 1, k == 0 ? 0.0 : 0.02);
        const testing::StructureGraph graph(cpu, s);
        GraphView v = graph.view();
        v.n_centers = v.n_nodes / 2;   // a halo: the other atoms send along their edges
        const ModelOutput a = evaluate_graph(cpu, v), b = capture.evaluate(v);
        EXPECT_LE(rel(a.atom_energy, b.atom_energy), 1e-8) << "step " << k;
        EXPECT_LE(rel(a.edge_grad, b.edge_grad), 1e-8) << "step " << k;
      }
      EXPECT_EQ(capture.recordings(), 1);
    }
  }
}

// MACE's operators (message, contraction, edge polynomials, radial basis) on the GPU's device kernels
// (libmlip_cuda_ops.so) against the CPU kernels:
// values, gradients and the second derivatives a force loss takes, float64 and float32, at sizes
// with many edges per centre and neighbour (the kernels' sums).
std::vector<torch::Tensor> mace_operator_outputs(const std::vector<torch::Tensor>& inputs, const torch::Device& device) {
  torch::manual_seed(11);
  const int64_t nodes = 300, n_out = 250, edges = 9000, S = 3;
  const auto idx = torch::dtype(torch::kInt64);
  const torch::Tensor path = torch::tensor({0, 1, 1, 1, 2, 3, 3, 3, 3}, idx).to(device);
  const torch::Tensor center = torch::randint(0, n_out, {edges}, idx).to(device);
  const torch::Tensor neighbor = torch::randint(0, nodes, {edges}, idx).to(device);
  const torch::Tensor mono =
      torch::tensor({0, 5, 5, 3, 5, 5, 1, 1, 5, 2, 4, 5, 0, 0, 0, 1, 2, 3, 4, 4, 2}, idx).view({7, 3}).to(device);
  const torch::Tensor species = torch::randint(0, S, {nodes}, idx).to(device);
  std::vector<torch::Tensor> in;
  for (const auto& x : inputs) in.push_back(x.to(device).requires_grad_(true));
  const torch::Tensor msg = equivariant_message(in[0], in[1], in[2], path, center, neighbor, n_out);
  const torch::Tensor b = symmetric_contraction(in[3], in[4], mono, species);
  // polynomials of the edges' vectors (the harmonics' operator): powers 0 to 3, outputs with
  // several terms and none
  const torch::Tensor terms =
      torch::tensor({0, 0, 0, 0, 1, 1, 0, 0, 1, 0, 2, 1, 3, 3, 0, 0, 3, 1, 1, 1, 3, 0, 0, 3}, idx).view({6, 4}).to(device);
  const torch::Tensor coefficients =
      torch::tensor({0.5, 1.5, -2.0, 0.25, 3.0, -1.0}, torch::dtype(in[5].scalar_type())).to(device);
  const torch::Tensor poly = vector_polynomials(in[5], terms, coefficients, 5);
  // the radial basis with its envelope (edges past the cutoff among them)
  const torch::Tensor k = (torch::arange(1, 9, torch::kFloat64) * (3.141592653589793 / 5.0)).to(in[6].options());
  const torch::Tensor radial = bessel_radial(in[6], k.detach(), 5.0, 5, true);
  const torch::Tensor loss =
      (msg * msg).sum() + (b * b * b).sum() + (poly * poly * poly).sum() + (radial * radial * radial).sum();
  const auto g = torch::autograd::grad({loss}, in, {}, true, true);
  torch::Tensor q = torch::zeros({}, loss.options());
  for (const auto& gk : g) q = q + (gk * gk).sum();
  const auto h = torch::autograd::grad({q}, in);
  std::vector<torch::Tensor> out = {msg.detach().cpu(), b.detach().cpu(), poly.detach().cpu(), radial.detach().cpu()};
  for (const auto& gk : g) out.push_back(gk.detach().cpu());
  for (const auto& hk : h) out.push_back(hk.cpu());
  return out;
}

std::vector<torch::Tensor> mace_inputs(torch::ScalarType dtype) {
  torch::manual_seed(12);
  const auto opt = torch::dtype(dtype);
  const int64_t C = 32;
  return {torch::randn({300, 4, C}, opt), torch::randn({9000, 4, 9}, opt), torch::randn({9000, 4, C}, opt),
          torch::randn({300, 5, C}, opt), torch::randn({3, 7, 4, C}, opt), torch::randn({9000, 3}, opt),
          torch::rand({9000, 1}, opt) * 5.5 + 0.5};
}

// The largest relative difference of b from a, output by output (each within `tol`).
double worst_difference(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b,
                        const std::vector<std::string>& names, double tol) {
  double worst = 0;
  for (std::size_t k = 0; k < a.size(); ++k) {
    const double d = (b[k] - a[k]).abs().max().item<double>() / a[k].abs().max().item<double>();
    EXPECT_LE(d, tol) << names[k];
    worst = std::max(worst, d);
  }
  return worst;
}

const std::vector<std::string> kMaceOutputs = {
    "message",  "contraction", "polynomials", "radial",    "d/dx",     "d/ds",     "d/dw",
    "d/dx'",    "d/dz",        "d/du",        "d/dr",      "2nd d/dx", "2nd d/ds", "2nd d/dw",
    "2nd d/dx'", "2nd d/dz",   "2nd d/du",    "2nd d/dr"};

TEST(DeviceKernelsGpu, MaceOperatorsEqualTheCpuKernels) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const torch::Device gpu = choose_device("cuda", 0, "test");
  ASSERT_EQ(device_kernels_unavailable(gpu), "");
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const auto inputs = mace_inputs(dtype);
    const double worst = worst_difference(mace_operator_outputs(inputs, torch::kCPU),
                                          mace_operator_outputs(inputs, gpu), kMaceOutputs,
                                          dtype == torch::kFloat64 ? 1e-12 : 1e-4);
    // Read by scripts/gpu-check.sh for its summary.
    std::printf("MACE device kernels %s: relative difference GPU vs CPU kernels: %.3g (largest of values, gradients, "
                "second derivatives)\n", dtype == torch::kFloat64 ? "float64" : "float32", worst);
  }
}

// PaiNN's vector_message and the compressed model's tabulated_contraction on the GPU's device
// kernels against the CPU kernels: values and the gradients MD takes, float64 and float32.
std::vector<torch::Tensor> edge_operator_outputs(const std::vector<torch::Tensor>& inputs, const torch::Device& device) {
  torch::manual_seed(13);
  const int64_t nodes = 400, n_out = 300, edges = 12000, nets = 3;
  const auto idx = torch::dtype(torch::kInt64);
  const torch::Tensor center = std::get<0>(torch::sort(torch::randint(0, n_out, {edges}, idx))).to(device);
  const torch::Tensor neighbor = torch::randint(0, nodes, {edges}, idx).to(device);
  const torch::Tensor net = torch::randint(0, nets, {edges}, idx).to(device);
  std::vector<torch::Tensor> in;
  for (std::size_t k = 0; k < 6; ++k) in.push_back(inputs[k].to(device).requires_grad_(true));
  const torch::Tensor table = inputs[6].to(device);
  const auto [ds, dv] = vector_message(in[0], in[1], in[2], in[3], center, neighbor, n_out);
  const torch::Tensor t = tabulated_contraction(in[4], in[5], center, net, table, 0.05, 0.5, n_out);
  const torch::Tensor loss = (ds * ds).sum() + (dv * dv).sum() + (t * t).sum();
  const auto g = torch::autograd::grad({loss}, in);   // no graph: the kernels' backward, as in MD
  std::vector<torch::Tensor> out = {ds.detach().cpu(), dv.detach().cpu(), t.detach().cpu()};
  for (const auto& gk : g) out.push_back(gk.cpu());
  return out;
}

std::vector<torch::Tensor> edge_inputs(torch::ScalarType dtype) {
  torch::manual_seed(14);
  const auto opt = torch::dtype(dtype);
  const int64_t F = 32, M = 64, edges = 12000;
  return {torch::randn({400, 3 * F}, opt), torch::randn({edges, 3 * F}, opt), torch::randn({400, 3, F}, opt),
          torch::randn({edges, 3}, opt),   torch::rand({edges}, opt) * 2.4,   torch::randn({edges, 4}, opt),
          torch::randn({3, 50, 6, M}, opt)};
}

const std::vector<std::string> kEdgeOutputs = {"ds", "dv", "T", "d/dphi", "d/dw", "d/dv", "d/dunit", "d/dx", "d/denv"};

TEST(DeviceKernelsGpu, PainnAndCompressedOperatorsEqualTheCpuKernels) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const torch::Device gpu = choose_device("cuda", 0, "test");
  ASSERT_EQ(device_kernels_unavailable(gpu), "");
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const auto inputs = edge_inputs(dtype);
    const double worst = worst_difference(edge_operator_outputs(inputs, torch::kCPU),
                                          edge_operator_outputs(inputs, gpu), kEdgeOutputs,
                                          dtype == torch::kFloat64 ? 1e-12 : 1e-4);
    std::printf("PaiNN/compressed device kernels %s: relative difference GPU vs CPU kernels: %.3g (largest of values "
                "and gradients)\n", dtype == torch::kFloat64 ? "float64" : "float32", worst);
  }
}

// se_e2_a's environment (mlip/ops/se_environment.h): values, the gradient MD takes and the
// second derivative a force loss takes, on `device`.
std::vector<torch::Tensor> environment_outputs(torch::ScalarType dtype, const torch::Device& device) {
  torch::manual_seed(15);
  const int64_t edges = 20000;
  const auto opt = torch::dtype(dtype).device(device);
  torch::Tensor v = torch::randn({edges, 3}, torch::dtype(torch::kFloat64));
  v = v / v.norm(2, 1, true) * (torch::rand({edges, 1}, torch::dtype(torch::kFloat64)) * 6.4 + 0.8);
  v = v.to(opt).requires_grad_(true);
  const torch::Tensor avg = (torch::rand({edges}, torch::dtype(torch::kFloat64)) * 0.3).to(opt);
  const torch::Tensor std = (torch::rand({edges, 2}, torch::dtype(torch::kFloat64)) + 0.5).to(opt);
  const auto [radial, env] = se_environment(v, avg, std, 2.0, 6.0);
  // w a leaf: the second derivative along the incoming gradients (a force loss's parameters') too
  const torch::Tensor w =
      torch::linspace(-1, 1, edges * 4, torch::dtype(torch::kFloat64)).view({edges, 4}).to(opt).requires_grad_(true);
  const torch::Tensor gv = torch::autograd::grad({(radial * radial).sum() + (env * w).sum()}, {v}, {}, true, true)[0];
  const auto second = torch::autograd::grad({(gv * gv).sum()}, {v, w});
  return {radial.detach().cpu(), env.detach().cpu(), gv.detach().cpu(), second[0].cpu(), second[1].cpu()};
}

const std::vector<std::string> kEnvironmentOutputs = {"radial", "env", "d/dv", "2nd d/dv", "2nd d/dv d/dw"};

TEST(DeviceKernelsGpu, SeEnvironmentEqualsTheCpuKernels) {
  if (const std::string why = testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const torch::Device gpu = choose_device("cuda", 0, "test");
  ASSERT_EQ(device_kernels_unavailable(gpu), "");
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double worst = worst_difference(environment_outputs(dtype, torch::kCPU), environment_outputs(dtype, gpu),
                                          kEnvironmentOutputs, dtype == torch::kFloat64 ? 1e-12 : 1e-4);
    std::printf("se_environment device kernels %s: relative difference GPU vs CPU kernels: %.3g (largest of values, "
                "gradients, second derivatives)\n", dtype == torch::kFloat64 ? "float64" : "float32", worst);
  }
}

// libmlip_cuda_ops.so reads each functor as its kernel's type: a library of this interface version
// but of other functors (built from other sources, nobody raised the version) is refused with the
// reason, never launched; so is one that cannot be loaded.
TEST(DeviceKernels, ALibraryOfAnotherLayoutIsRefused) {
  const std::string stale = mlip::detail::cuda_library_refused(MLIP_TEST_STALE_CUDA_OPS);
  EXPECT_NE(stale.find("is not the CUDA library of this mlip"), std::string::npos) << stale;
  const std::string missing = mlip::detail::cuda_library_refused("/nonexistent/libmlip_cuda_ops.so");
  EXPECT_NE(missing.find("cannot be loaded"), std::string::npos) << missing;
}

// The GPU cases' comparisons, with the device kernels' code run by the CPU's loop: the same code
// path but the launch, on every machine.
TEST(DeviceKernels, TheGpuCasesComparisonsHoldOnTheCpuLoop) {
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const double tol = dtype == torch::kFloat64 ? 1e-12 : 1e-4;
    const auto mace = mace_inputs(dtype), edge = edge_inputs(dtype);
    const auto mace_cpu = mace_operator_outputs(mace, torch::kCPU), edge_cpu = edge_operator_outputs(edge, torch::kCPU);
    const KernelChoiceScope use(KernelChoice::device_kernels);
    worst_difference(mace_cpu, mace_operator_outputs(mace, torch::kCPU), kMaceOutputs, tol);
    worst_difference(edge_cpu, edge_operator_outputs(edge, torch::kCPU), kEdgeOutputs, tol);
    const KernelChoiceScope aten(KernelChoice::aten);
    const auto environment_aten = environment_outputs(dtype, torch::kCPU);
    const KernelChoiceScope device(KernelChoice::device_kernels);
    worst_difference(environment_aten, environment_outputs(dtype, torch::kCPU), kEnvironmentOutputs, tol);
  }
}

// z's gradients sum each species' nodes in chunks of 64 nodes or more (ContractGradZ,
// ContractSecondZ, then ContractSumChunks): a species with no node between two with nodes, one
// with fewer nodes than a chunk, one with exactly a chunk and one with several (its last short),
// against the CPU kernels; first and second derivatives.
TEST(DeviceKernels, ContractionWeightGradientsInChunksCoverEverySpecies) {
  torch::manual_seed(5);
  const auto f64 = torch::dtype(torch::kFloat64), i64 = torch::dtype(torch::kInt64);
  const int64_t nodes = 500;   // chunks of 64 nodes (few channels: 2^20 threads would take fewer)
  torch::Tensor species = torch::zeros({nodes}, i64);
  species.narrow(0, 100, 3).fill_(2);   // species 1: none; species 2: three nodes
  species.narrow(0, 200, 64).fill_(3);  // species 3: one whole chunk; species 0: 433 nodes, 7 chunks
  const torch::Tensor mono =
      torch::tensor({0, 5, 5, 3, 5, 5, 1, 1, 5, 2, 4, 5, 0, 0, 0, 1, 2, 3, 4, 4, 2}, i64).view({7, 3});
  const torch::Tensor x = torch::randn({nodes, 5, 8}, f64), z = torch::randn({4, 7, 4, 8}, f64);
  auto gradients = [&] {
    const torch::Tensor xg = x.clone().requires_grad_(true), zg = z.clone().requires_grad_(true);
    const torch::Tensor b = symmetric_contraction(xg, zg, mono, species);
    const auto g = torch::autograd::grad({(b * b * b).sum()}, {xg, zg}, {}, true, true);
    const auto h = torch::autograd::grad({(g[0] * g[0]).sum() + (g[1] * g[1]).sum()}, {xg, zg});
    return std::vector<torch::Tensor>{g[1].detach(), h[0], h[1]};
  };
  const std::vector<torch::Tensor> cpu = gradients();
  const KernelChoiceScope use(KernelChoice::device_kernels);
  const std::vector<torch::Tensor> device = gradients();
  EXPECT_EQ(cpu[0].select(0, 1).abs().max().item<double>(), 0.0);   // no node of species 1
  for (const int64_t s : {0, 2, 3}) EXPECT_GT(cpu[0].select(0, s).abs().max().item<double>(), 0.0);
  worst_difference(cpu, device, {"d/dz", "2nd d/dx", "2nd d/dz"}, 1e-12);
}

}  // namespace
}  // namespace mlip

// ---------------------------------------------------------------------------------------------
// GPU memory and the calls sized by it (mlip/model/device_memory.h): the sizer's logic and the
// split-and-retry of a call that runs out of memory, driven here with figures of the test's own.

TEST(DeviceMemory, TheFirstCallIsSmallThenTheMeasuredBytesDecide) {
  mlip::ChunkSizer sizer(0.5, 1000);
  EXPECT_FALSE(sizer.seen());
  EXPECT_EQ(sizer.chunk(10000, int64_t(1) << 40), 1000);   // nothing seen yet: the first call's size
  EXPECT_EQ(sizer.chunk(300, int64_t(1) << 40), 300);
  // 1000 centres with 40 edges each took 1000 bytes per edge: 40 kB per centre.
  sizer.observe(1000, 40000, 40000000);
  EXPECT_DOUBLE_EQ(sizer.bytes_per_edge(), 1000.0);
  EXPECT_DOUBLE_EQ(sizer.bytes_per_centre(), 40000.0);
  EXPECT_EQ(sizer.chunk(10000, 1000000000), 10000);          // all fit in half of 1 GB
  EXPECT_EQ(sizer.chunk(100000, 1000000000), 12500);         // 0.5 GB / 40 kB
  EXPECT_EQ(sizer.chunk(100000, 10), 1);                      // never less than one
  // A denser call with fewer bytes per edge: the most bytes per edge stays, the density is the last.
  sizer.observe(1000, 80000, 40000000);
  EXPECT_DOUBLE_EQ(sizer.bytes_per_edge(), 1000.0);
  EXPECT_EQ(sizer.chunk(100000, 1000000000), 6250);
  sizer.out_of_memory(5000);
  EXPECT_EQ(sizer.limit(), 2500);
  EXPECT_EQ(sizer.chunk(100000, 1000000000), 2500);
  sizer.out_of_memory(8000);                                  // an older, larger failure does not raise it
  EXPECT_EQ(sizer.limit(), 2500);
}

namespace {
[[noreturn]] void throw_out_of_memory() {
  TORCH_CHECK_WITH(OutOfMemoryError, false, "CUDA out of memory. Tried to allocate 2.00 GiB (test)");
}
}  // namespace

TEST(DeviceMemory, OutOfMemoryErrorsAreKnownByTypeAndByTorchScriptsMessage) {
  try {
    throw_out_of_memory();
  } catch (const std::exception& e) {
    EXPECT_TRUE(mlip::is_out_of_memory(e));
  }
  EXPECT_TRUE(mlip::is_out_of_memory(std::runtime_error("The following operation failed in the TorchScript "
                                                        "interpreter.\nRuntimeError: CUDA out of memory. Tried")));
  EXPECT_TRUE(mlip::is_out_of_memory(mlip::Error("inside the model: RuntimeError: CUDA out of memory. Tried to "
                                                 "allocate 20.00 MiB")));   // mlip::evaluate_module's form
  EXPECT_TRUE(mlip::is_out_of_memory(std::runtime_error("mlip's CUDA kernel 3: launch failed: out of memory")));
  EXPECT_FALSE(mlip::is_out_of_memory(std::runtime_error("index out of range")));
  EXPECT_FALSE(mlip::is_out_of_memory(std::runtime_error("DefaultCPUAllocator: not enough memory")));
  EXPECT_FALSE(mlip::device_memory(torch::kCPU).has_value());   // the CPU has no figures
}

// A recording's allocation that failed, where max_split_size_mb makes LibTorch's allocator free its
// cache inside the recording (CUDA refuses): out of memory only under that configuration.
TEST(DeviceMemory, ARecordingRefusedItsAllocatorsFreeIsOutOfMemoryUnderMaxSplitSize) {
  const c10::Error refused({"release_block", "CUDACachingAllocator.cpp", 1},
                           "CUDA error: operation not permitted when stream is capturing");
  const char* saved[2] = {std::getenv("PYTORCH_ALLOC_CONF"), std::getenv("PYTORCH_CUDA_ALLOC_CONF")};
  const std::string kept[2] = {saved[0] ? saved[0] : "", saved[1] ? saved[1] : ""};
  unsetenv("PYTORCH_ALLOC_CONF");
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  EXPECT_FALSE(mlip::is_out_of_memory(refused));   // another call a recording may not make
  setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True", 1);
  EXPECT_FALSE(mlip::is_out_of_memory(refused));
  EXPECT_EQ(mlip::out_of_memory_note(refused), "");
  setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:False,max_split_size_mb:512", 1);
  EXPECT_TRUE(mlip::is_out_of_memory(refused));
  EXPECT_NE(mlip::out_of_memory_note(refused).find("max_split_size_mb"), std::string::npos);
  unsetenv("PYTORCH_CUDA_ALLOC_CONF");
  setenv("PYTORCH_ALLOC_CONF", "max_split_size_mb:128", 1);   // LibTorch's newer name
  EXPECT_TRUE(mlip::is_out_of_memory(std::runtime_error("CUDA error: operation failed due to a previous error during capture")));
  EXPECT_FALSE(mlip::is_out_of_memory(std::runtime_error("index out of range")));
  EXPECT_EQ(mlip::out_of_memory_note(std::runtime_error("CUDA out of memory. Tried to allocate 2.00 GiB")), "");
  setenv("PYTORCH_ALLOC_CONF", "garbage_collection_threshold:0.6", 1);   // frees before an allocation, not after
  EXPECT_FALSE(mlip::is_out_of_memory(refused));
  unsetenv("PYTORCH_ALLOC_CONF");
  if (saved[0]) setenv("PYTORCH_ALLOC_CONF", kept[0].c_str(), 1);
  if (saved[1]) setenv("PYTORCH_CUDA_ALLOC_CONF", kept[1].c_str(), 1);
}

// Calls of at most `chunk` centres, as equal as they can be (the pair style's `chunk` and the sizer's).
TEST(DeviceMemory, EqualChunks) {
  EXPECT_EQ(mlip::equal_chunk(1152, 1024), 576);
  EXPECT_EQ(mlip::equal_chunk(1024, 1024), 1024);
  EXPECT_EQ(mlip::equal_chunk(2049, 1024), 683);
  EXPECT_EQ(mlip::equal_chunk(7, 100), 7);
  EXPECT_EQ(mlip::equal_chunk(0, 100), 1);  // no calls (a loop to 0 in steps of 1)
  EXPECT_EQ(mlip::equal_chunk(5, 0), 1);    // a chunk below 1 counts as 1
}

TEST(DeviceMemory, ACallThatRunsOutOfMemoryIsSplitAndEveryCentreEvaluatedOnce) {
  // A "device" on which a call of more than 300 centres runs out of memory.
  mlip::ChunkSizer sizer(0.8, 1000);
  std::vector<int> evaluated(2000, 0);
  std::vector<int64_t> sizes;
  auto evaluate = [&](int64_t a, int64_t b) {
    if (b - a > 300) throw_out_of_memory();
    sizes.push_back(b - a);
    for (int64_t i = a; i < b; ++i) evaluated[static_cast<std::size_t>(i)]++;
  };
  const auto plenty = [] { return int64_t(1) << 40; };
  mlip::evaluate_within_memory(0, 2000, sizer, plenty, evaluate);
  EXPECT_TRUE(std::all_of(evaluated.begin(), evaluated.end(), [](int n) { return n == 1; }));
  EXPECT_EQ(sizer.limit(), 250);   // 1000 -> 500 -> 250 (the first call and its halves ran out)
  for (int64_t n : sizes) EXPECT_LE(n, 300);
  // The next step starts at the limit: no call runs out again.
  sizes.clear();
  std::fill(evaluated.begin(), evaluated.end(), 0);
  mlip::evaluate_within_memory(0, 2000, sizer, plenty, evaluate);
  EXPECT_TRUE(std::all_of(evaluated.begin(), evaluated.end(), [](int n) { return n == 1; }));
  EXPECT_EQ(sizes, std::vector<int64_t>(8, 250));
  // Other errors, and a single centre that does not fit, are the caller's.
  EXPECT_THROW(mlip::evaluate_within_memory(0, 10, sizer, plenty, [](int64_t, int64_t) { throw std::runtime_error("bad"); }),
               std::runtime_error);
  EXPECT_THROW(mlip::evaluate_within_memory(0, 10, sizer, plenty, [](int64_t, int64_t) { throw_out_of_memory(); }),
               c10::OutOfMemoryError);
  // An error already reported, whatever it says (LAMMPS's error->one throws its own exception, not
  // a std::runtime_error, once it has printed the error): not tried again.
  struct Reported : std::exception {
    const char* what() const noexcept override { return "ERROR on proc 0: CUDA out of memory. Tried to allocate"; }
  };
  int calls = 0;
  EXPECT_THROW(mlip::evaluate_within_memory(0, 10, sizer, plenty, [&](int64_t, int64_t) { ++calls, throw Reported(); }),
               Reported);
  EXPECT_EQ(calls, 1);
}

// The calls after the first measured one take the measured size: 100000 centres, 40 kB each, in
// half of 1 GB: one call of 1000 (nothing measured yet), then 99000 in 8 calls of 12375 (at most
// 12500), not 99 more calls of 1000.
TEST(DeviceMemory, TheCallsAfterTheFirstMeasuredOneAreSizedByIt) {
  mlip::ChunkSizer sizer(0.5, 1000);
  std::vector<int64_t> sizes;
  int64_t evaluated = 0;
  auto evaluate = [&](int64_t a, int64_t b) {
    sizes.push_back(b - a);
    evaluated += b - a;
    sizer.observe(b - a, 40 * (b - a), 40000 * (b - a));
  };
  mlip::evaluate_within_memory(0, 100000, sizer, [] { return int64_t(1000000000); }, evaluate);
  std::vector<int64_t> expected(9, 12375);
  expected[0] = 1000;
  EXPECT_EQ(sizes, expected);
  EXPECT_EQ(evaluated, 100000);
}

// An out-of-memory limit is tried higher after calm calls: a passing error (another process's
// memory) does not halve every later call for good, and a limit that holds costs few failures.
namespace {
// A "device" on which a call of more than `fits` centres runs out of memory, counting failures.
struct SmallDevice {
  int64_t fits = 300;
  int64_t failures = 0;
  void operator()(int64_t a, int64_t b) {
    if (b - a > fits) {
      ++failures;
      throw_out_of_memory();
    }
  }
};
}  // namespace

TEST(DeviceMemory, TheLimitIsTriedHigherAfterCalmCallsAndWaitsLongerWhenItHolds) {
  mlip::ChunkSizer sizer(0.8, 1000);
  SmallDevice device;
  int64_t &device_fits = device.fits, &failures = device.failures;
  const auto plenty = [] { return int64_t(1) << 40; };
  const auto steps = [&](int n) {
    for (int i = 0; i < n; ++i) mlip::evaluate_within_memory(0, 2000, sizer, plenty, std::ref(device));
  };
  steps(1);
  EXPECT_EQ(sizer.limit(), 250);   // 1000 -> 500 -> 250
  EXPECT_EQ(sizer.retry(), 128);
  // The limit holds: each raised try (500) fails once, then waits twice as long.
  failures = 0;
  const int64_t calls_per_step = 8;   // 2000 centres in calls of 250
  steps(int(4 * 128 / calls_per_step));
  EXPECT_EQ(sizer.limit(), 250);
  EXPECT_EQ(failures, 2);          // after 128 calls, then after 256 more
  EXPECT_EQ(sizer.retry(), 512);
  // The memory comes back: the limit doubles after each calm stretch of 512 calls (136 of this one
  // are past: 17 steps since the last failure) and is dropped once it reaches a step's atoms.
  device_fits = 1 << 30;
  failures = 0;
  steps((512 - 17 * calls_per_step) / calls_per_step);
  EXPECT_EQ(sizer.limit(), 500);
  steps(512 / 4);    // calls of 500
  EXPECT_EQ(sizer.limit(), 1000);
  steps(512 / 2 - 1);
  EXPECT_EQ(sizer.limit(), 1000);
  steps(1);
  EXPECT_EQ(sizer.limit(), 0);
  EXPECT_EQ(failures, 0);
  EXPECT_EQ(sizer.chunk(2000, plenty()), 1000);   // the first call's size: nothing was measured
}

// A failed try brings back the limit that held, though the call that failed (2100 centres in
// calls of at most 500: 420) was less than twice it; an error in a call no larger than that limit
// is a new one (memory got tighter): it halves the call and leaves the wait as it was.
TEST(DeviceMemory, AFailedTryBringsBackTheLimitThatHeld) {
  mlip::ChunkSizer sizer(0.8, 1000);
  SmallDevice device;
  int64_t &device_fits = device.fits, &failures = device.failures;
  const auto plenty = [] { return int64_t(1) << 40; };
  const auto step = [&] { mlip::evaluate_within_memory(0, 2100, sizer, plenty, std::ref(device)); };
  mlip::evaluate_within_memory(0, 2000, sizer, plenty, std::ref(device));   // 1000 -> 500 -> 250
  EXPECT_EQ(sizer.limit(), 250);
  for (int k = 0; k < 1000 && failures < 3; ++k) step();   // the try at 500 fails
  EXPECT_EQ(failures, 3);
  EXPECT_EQ(sizer.limit(), 250);
  EXPECT_EQ(sizer.retry(), 256);
  device_fits = 200;   // tighter: calls of 234 fail
  step();
  EXPECT_EQ(sizer.limit(), 117);
  EXPECT_EQ(sizer.retry(), 256);
}

TEST(DeviceMemoryGpu, FiguresFollowAnAllocation) {
  if (const std::string why = mlip::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const torch::Device gpu(torch::kCUDA, 0);
  mlip::reset_peak_memory(gpu);
  const auto before = mlip::device_memory(gpu);
  ASSERT_TRUE(before.has_value()) << mlip::device_kernels_unavailable();
  EXPECT_GT(before->total, before->free);
  {
    const torch::Tensor t = torch::ones({int64_t(64) << 20}, torch::TensorOptions().device(gpu).dtype(torch::kFloat64));
    const auto during = mlip::device_memory(gpu);
    EXPECT_GE(during->allocated - before->allocated, int64_t(512) << 20);
  }
  const auto after = mlip::device_memory(gpu);
  EXPECT_GE(after->peak - before->allocated, int64_t(512) << 20);   // the tensor's 512 MiB at the peak
  EXPECT_GE(after->cached, int64_t(512) << 20);                     // freed into LibTorch's cache
  mlip::release_cached_memory();
  EXPECT_LT(mlip::device_memory(gpu)->cached, int64_t(512) << 20);
  std::printf("device memory: %.1f GiB total, %.1f GiB free\n", double(after->total) / (1 << 30),
              double(mlip::device_memory(gpu)->free) / (1 << 30));
}

// ---------------------------------------------------------------------------------------------
// The neighbour graph built on the device (mlip/model/device_graph.h), on the CPU's loop here:
// ChunkGraph's graph of the same atoms (the host path), edge for edge, for local models and the
// halos of message-passing ones; atoms the model skips take no part.

namespace {

struct Atoms {
  std::vector<double> x;         // (n, 3)
  std::vector<int64_t> species;  // (n), -1: skipped
};

// n atoms in a box of side `side` at least 0.7 A apart (a liquid's density at 10 atoms per nm^3 x 10),
// one in 7 skipped by the model.
Atoms random_atoms(int n, double side, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(0.0, side);
  Atoms a;
  while (static_cast<int>(a.species.size()) < n) {
    const double p[3] = {u(rng), u(rng), u(rng)};
    bool close = false;
    for (std::size_t j = 0; j < a.species.size() && !close; ++j) {
      double r2 = 0;
      for (int d = 0; d < 3; ++d) r2 += (a.x[3 * j + d] - p[d]) * (a.x[3 * j + d] - p[d]);
      close = r2 < 0.49;
    }
    if (close) continue;
    a.x.insert(a.x.end(), p, p + 3);
    a.species.push_back(a.species.size() % 7 == 3 ? -1 : static_cast<int64_t>(a.species.size() % 2));
  }
  return a;
}

// (centre atom, neighbour atom, r) of every edge of a graph, sorted.
using Edge = std::tuple<int64_t, int64_t, double, double, double>;
std::vector<Edge> edges_of(const std::vector<int64_t>& node_atom, const int64_t* index, int64_t n_edges,
                           const double* r) {
  std::vector<Edge> e;
  for (int64_t k = 0; k < n_edges; ++k)
    e.emplace_back(node_atom[static_cast<std::size_t>(index[k])], node_atom[static_cast<std::size_t>(index[n_edges + k])],
                   r[3 * k], r[3 * k + 1], r[3 * k + 2]);
  std::sort(e.begin(), e.end());
  return e;
}

// The host's graph and the device's of the same atoms, for centres in one range and in another, 1-3 hops.
void check_device_graph(const Atoms& a) {
  const int n = static_cast<int>(a.species.size()), n_local = 400;
  const double cutoff = 3.0;
  const torch::Tensor x = torch::tensor(a.x, torch::kFloat64).view({n, 3});
  const torch::Tensor species = torch::tensor(a.species, torch::kInt64);
  const mlip::DeviceGraphBuilder cells(x, species, cutoff);
  for (auto [first, last, hops] : {std::tuple{0, n_local, 1}, {0, n_local, 2}, {0, n_local, 3}, {150, 300, 1}, {150, 300, 2}}) {
    const mlip::DeviceGraph d = cells.build(first, last, hops);
    mlip::ChunkGraph h;
    std::vector<int> centres(static_cast<std::size_t>(last - first));
    std::iota(centres.begin(), centres.end(), first);
    h.build(
        centres.data(), centres.data() + centres.size(), n, cutoff, [&](int i) { return static_cast<int>(a.species[i]); },
        [&](int i, auto&& visit) {
          for (int j = 0; j < n; ++j)
            if (j != i) visit(j, a.x[3 * j] - a.x[3 * i], a.x[3 * j + 1] - a.x[3 * i + 1], a.x[3 * j + 2] - a.x[3 * i + 2]);
        },
        hops);
    ASSERT_EQ(d.n_centers, h.n_centers) << hops << " hops";
    ASSERT_EQ(d.n_edges(), h.n_edges) << hops << " hops";
    ASSERT_GT(h.n_edges, 1000);
    const std::vector<int64_t> d_atoms(d.node_atom.data_ptr<int64_t>(), d.node_atom.data_ptr<int64_t>() + d.n_nodes());
    const std::vector<int64_t> h_atoms(h.node_atom.begin(), h.node_atom.end());
    // Centres in atom order first (ChunkGraph's too), then the same other atoms.
    EXPECT_TRUE(std::equal(d_atoms.begin(), d_atoms.begin() + d.n_centers, h_atoms.begin()));
    EXPECT_EQ(std::set<int64_t>(d_atoms.begin(), d_atoms.end()), std::set<int64_t>(h_atoms.begin(), h_atoms.end()));
    for (int64_t k = 0; k < d.n_nodes(); ++k)
      EXPECT_EQ(d.species[k].item<int64_t>(), a.species[static_cast<std::size_t>(d_atoms[static_cast<std::size_t>(k)])]);
    EXPECT_EQ(edges_of(d_atoms, d.edge_index.data_ptr<int64_t>(), d.n_edges(), d.edge_vectors.data_ptr<double>()),
              edges_of(h_atoms, h.edge_index.data(), h.n_edges, h.edge_vectors.data()))
        << hops << " hops";
  }
  EXPECT_EQ(mlip::build_device_graph(x, species, n_local, cutoff, 2).n_edges(), cells.build(0, n_local, 2).n_edges());
}

}  // namespace

// The device graph of atoms in a box, and of the same atoms and one far from them (a grid of more
// cells than 8 per atom: its cells hashed into fewer lists, cell_grid.h), against the host's.
TEST(DeviceGraph, EqualsTheHostGraphOfTheSameAtoms) {
  for (const bool far_atom : {false, true}) {
    SCOPED_TRACE(far_atom ? "and an atom 1e5 A away (cells hashed)" : "in a box");
    Atoms a = random_atoms(700, 16.0, 5);
    if (far_atom) {   // a taken atom, not a centre
      a.x.insert(a.x.begin() + 3 * 500, {1e5, -2e5, 3e4});
      a.species.insert(a.species.begin() + 500, 1);
    }
    check_device_graph(a);
  }
}

// Clusters of atoms with a few strays far away (grids of one list per cell and hashed ones, the
// strays in clamped edge cells of grids of 2^20 cells a side too), and partners put at the cutoff
// from cluster atoms, along an axis and a diagonal (their separations the cutoff to rounding: some
// in, some out): every edge within the cutoff and none beyond, against all pairs.
TEST(DeviceGraph, StraysAndPairsAtTheCutoffAgainstAllPairs) {
  std::mt19937 rng(11);
  int at_cutoff_in = 0, at_cutoff_out = 0, clamped = 0;
  for (int trial = 0; trial < 12; ++trial) {
    const double cutoff = std::uniform_real_distribution<double>(1.5, 5.0)(rng);
    Atoms a = random_atoms(150 + 40 * trial, 9.0 + trial, 100 + trial);
    const int64_t cluster = static_cast<int64_t>(a.species.size());
    std::uniform_real_distribution<double> far(-5e6, 5e6);
    double lo = 0, hi = 0;
    for (int k = 0; k < trial % 4; ++k) {
      a.x.insert(a.x.end(), {far(rng), far(rng), far(rng)});
      a.species.push_back(k % 2);
      lo = std::min({lo, a.x[a.x.size() - 3], a.x[a.x.size() - 2], a.x[a.x.size() - 1]});
      hi = std::max({hi, a.x[a.x.size() - 3], a.x[a.x.size() - 2], a.x[a.x.size() - 1]});
    }
    clamped += (hi - lo) / cutoff > double(1 << 20);
    const double diagonal = cutoff / std::sqrt(3.0);
    for (const double d : {std::nextafter(cutoff, 0.0), cutoff, std::nextafter(cutoff, 10.0)})
      for (const bool along_axis : {true, false}) {
        const std::size_t base = static_cast<std::size_t>(3 * (trial * 7 % cluster));
        const double step = along_axis ? d : diagonal * (d / cutoff);
        a.x.insert(a.x.end(), {a.x[base] + step, a.x[base + 1] + (along_axis ? 0.0 : step), a.x[base + 2] + (along_axis ? 0.0 : step)});
        a.species.push_back(1);
        double r2 = 0;
        for (int c = 0; c < 3; ++c) r2 += (a.x[a.x.size() - 3 + c] - a.x[base + c]) * (a.x[a.x.size() - 3 + c] - a.x[base + c]);
        if (a.species[base / 3] >= 0) (r2 < cutoff * cutoff ? at_cutoff_in : at_cutoff_out) += 1;
      }
    const int64_t n = static_cast<int64_t>(a.species.size());
    SCOPED_TRACE("trial " + std::to_string(trial) + ": " + std::to_string(n) + " atoms, cutoff " + std::to_string(cutoff));
    const mlip::DeviceGraph d = mlip::build_device_graph(torch::tensor(a.x, torch::kFloat64).view({n, 3}),
                                                         torch::tensor(a.species, torch::kInt64), n, cutoff, 1);
    std::vector<Edge> want;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < n; ++j) {
        if (i == j || a.species[static_cast<std::size_t>(i)] < 0 || a.species[static_cast<std::size_t>(j)] < 0) continue;
        const double r[3] = {a.x[3 * j] - a.x[3 * i], a.x[3 * j + 1] - a.x[3 * i + 1], a.x[3 * j + 2] - a.x[3 * i + 2]};
        if (r[0] * r[0] + r[1] * r[1] + r[2] * r[2] < cutoff * cutoff) want.emplace_back(i, j, r[0], r[1], r[2]);
      }
    std::sort(want.begin(), want.end());
    const std::vector<int64_t> atoms(d.node_atom.data_ptr<int64_t>(), d.node_atom.data_ptr<int64_t>() + d.n_nodes());
    EXPECT_EQ(edges_of(atoms, d.edge_index.data_ptr<int64_t>(), d.n_edges(), d.edge_vectors.data_ptr<double>()), want);
  }
  // What the cases are for: partners on both sides of the cutoff, and clamped grids.
  EXPECT_GT(at_cutoff_in, 0);
  EXPECT_GT(at_cutoff_out, 0);
  EXPECT_GT(clamped, 0);
}

TEST(DeviceGraph, EmptyFarApartAndNonFiniteAtoms) {
  // No atoms, no centres, atoms far apart (a grid of many empty cells).
  EXPECT_EQ(mlip::build_device_graph(torch::zeros({0, 3}, torch::kFloat64), torch::zeros({0}, torch::kInt64), 0, 3.0, 1)
                .n_edges(),
            0);
  const torch::Tensor far = torch::tensor({0.0, 0.0, 0.0, 1000.0, 1000.0, 1000.0, 1.0, 0.0, 0.0}, torch::kFloat64).view({3, 3});
  const mlip::DeviceGraph sparse = mlip::build_device_graph(far, torch::zeros({3}, torch::kInt64), 1, 3.0, 1);
  EXPECT_EQ(sparse.n_centers, 1);
  EXPECT_EQ(sparse.n_edges(), 1);
  EXPECT_EQ(sparse.n_nodes(), 2);
  // A position not finite: an error naming the atom where the model takes it; an atom it skips
  // (species -1) is outside the grid whatever its position; all atoms skipped: no edges.
  for (const double bad : {std::nan(""), std::numeric_limits<double>::infinity()}) {
    torch::Tensor odd = far.clone();
    odd[2][1] = bad;
    try {
      mlip::build_device_graph(odd, torch::zeros({3}, torch::kInt64), 1, 3.0, 1);
      ADD_FAILURE() << "a non-finite position was taken";
    } catch (const mlip::Error& e) {
      EXPECT_NE(std::string(e.what()).find("atom 2 has a non-finite position"), std::string::npos) << e.what();
    }
    const mlip::DeviceGraph skipped = mlip::build_device_graph(odd, torch::tensor({0, 0, -1}, torch::kInt64), 1, 3.0, 1);
    EXPECT_EQ(skipped.n_edges(), 0);
    EXPECT_EQ(skipped.n_nodes(), 1);
    EXPECT_EQ(mlip::build_device_graph(odd, torch::full({3}, -1, torch::kInt64), 1, 3.0, 1).n_edges(), 0);
  }
}

// The whole step with static shapes (mlip/model/device_step.h), on the CPU's loop here: the same
// energies, forces and virials onto the atoms as the device graph's call of the model (whose graph,
// with its halo, the tests above check), for one net per neighbour species, one per species pair,
// float32, and message-passing models (PaiNN of 2 and 3 layers, float32 too, and MACE: each chunk
// with its halo);
// moved atoms, more atoms (capacities grown) and a denser box (edges outgrow their nets: the step
// evaluated again) alike; in one chunk and in several.
namespace {

mlip::StepOutput reference_step(const mlip::Model& m, const Atoms& a, int64_t n_local) {
  const int64_t n = static_cast<int64_t>(a.species.size());
  const mlip::DeviceGraph g = mlip::build_device_graph(torch::tensor(a.x, torch::kFloat64).view({n, 3}),
                                                       torch::tensor(a.species, torch::kInt64), n_local,
                                                       m.info().cutoff, std::max(m.info().message_passing_layers, 1));
  const mlip::ModelOutput out = mlip::evaluate_graph(m, g.view());
  mlip::EdgeForceRequest request;
  request.virial = request.node_virial = true;
  const mlip::EdgeForces ef = mlip::edge_forces(g.view(), out.edge_grad, request);
  mlip::StepOutput r;
  r.atom_energy = torch::zeros({n_local}, torch::kFloat64).index_add_(0, g.node_atom.narrow(0, 0, g.n_centers), out.atom_energy);
  r.forces = torch::zeros({n, 3}, torch::kFloat64).index_add_(0, g.node_atom, ef.forces);
  r.atom_virial = torch::zeros({n, 9}, torch::kFloat64).index_add_(0, g.node_atom, ef.node_virial);
  r.virial = ef.virial.view({9});
  r.n_edges = g.n_edges();
  r.shortest = std::sqrt(g.edge_vectors.square().sum(1).min().item<double>());
  return r;
}

// The edges of the device graphs of K chunks of the local atoms (DeviceStep's ranges), each with its
// halo: a message-passing model's chunks list their halos' edges again.
int64_t chunks_edges(const mlip::Model& m, const Atoms& a, int64_t n_local, int64_t K) {
  const int64_t n = static_cast<int64_t>(a.species.size());
  const mlip::DeviceGraphBuilder cells(torch::tensor(a.x, torch::kFloat64).view({n, 3}),
                                       torch::tensor(a.species, torch::kInt64), m.info().cutoff);
  int64_t edges = 0;
  for (int64_t k = 0; k < K; ++k)   // atom i is in chunk i * K / n_local
    edges += cells.build((k * n_local + K - 1) / K, ((k + 1) * n_local + K - 1) / K,
                         std::max(m.info().message_passing_layers, 1)).n_edges();
  return edges;
}

double relative(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(b.abs().max().item<double>(), 1e-300);
}

}  // namespace

TEST(DeviceStep, EqualsTheDeviceGraphsModelCallOnTheAtoms) {
  const mlip::testing::TempDir dir("mlip_test_device_step");
  const std::vector<std::pair<std::string, double>> models = {
      {"se_e2_a", 1e-12},
      {R"(se_e2_a@3.5:{"embedding":[4,8],"axis_neurons":4,"fitting":[8,8],"type_one_side":false})", 1e-12},
      {R"(se_e2_a@3.5:{"embedding":[4,8],"axis_neurons":4,"fitting":[8,8]}/f32)", 1e-5},
      {"painn", 1e-12},
      {"painn3", 1e-12},
      {R"(painn@3.0:{"features":8,"layers":2,"radial_basis":4}/f32)", 1e-5},
      {R"(painn@3.0:{"features":8,"layers":1,"radial_basis":4})", 1e-12},
      {"mace", 1e-12}};
  for (const auto& [name, tolerance] : models) {
    const std::string path = (dir.path / "model.pt").string();
    mlip::testing::write_test_model(name, path);
    const mlip::Model m = mlip::Model::load(path);
    Atoms moved = random_atoms(500, 14.0, 7);
    for (double& v : moved.x) v += 0.05 * std::sin(v * 13.0);
    Atoms dense = random_atoms(500, 14.0, 7);
    for (double& v : dense.x) v *= 0.85;
    Atoms far = random_atoms(800, 16.0, 8);   // and a ghost far away: the grid's cells hashed
    far.x.insert(far.x.end(), {4e4, 1e3, -2e4});
    far.species.push_back(0);
    // In chunks of 60: the first with no centres (atoms the model skips), the second of one species.
    Atoms sparse = random_atoms(500, 14.0, 7);
    std::fill(sparse.species.begin(), sparse.species.begin() + 60, int64_t{-1});
    std::fill(sparse.species.begin() + 60, sparse.species.begin() + 120, int64_t{1});
    // What each step is, and the local atoms per chunk of the chunked step (0: one chunk): 5
    // chunks, kept for more atoms, then 8 (the capacities chosen anew).
    const std::vector<std::tuple<const char*, Atoms, int64_t, int64_t>> steps = {
        {"first", random_atoms(500, 14.0, 7), 300, 60},
        {"moved", moved, 300, 60},
        {"more atoms", random_atoms(800, 16.0, 8), 500, 120},
        {"an atom far away", far, 500, 120},
        {"a chunk of no centres, one of one species", sparse, 300, 60},
        {"denser", dense, 300, 40}};
    for (const bool chunked : {false, true}) {
      mlip::DeviceStep step(m, m.info().cutoff, /*record=*/false);
      int64_t repeats = 0;
      for (const auto& [what, atoms, n_local, chunk] : steps) {
        const int64_t n = static_cast<int64_t>(atoms.species.size()), chunk_atoms = chunked ? chunk : 0;
        const mlip::StepOutput ref = reference_step(m, atoms, n_local);
        const mlip::StepOutput got =
            step.evaluate(atoms.x.data(), 1.0, atoms.species.data(), n, n_local, true, chunk_atoms);
        SCOPED_TRACE(name + ", " + what + (chunked ? ", chunked" : ""));
        ASSERT_EQ(got.n_edges, chunks_edges(m, atoms, n_local, step.capacity().chunks));
        EXPECT_LE(relative(got.atom_energy, ref.atom_energy), tolerance);
        EXPECT_LE(relative(got.forces, ref.forces), tolerance);
        EXPECT_LE(relative(got.virial, ref.virial), tolerance);
        EXPECT_LE(relative(got.atom_virial, ref.atom_virial), tolerance);
        // Without per-atom virials: the same step.
        const mlip::StepOutput plain =
            step.evaluate(atoms.x.data(), 1.0, atoms.species.data(), n, n_local, false, chunk_atoms);
        EXPECT_FALSE(plain.atom_virial.defined());
        EXPECT_TRUE(torch::equal(plain.forces, got.forces));
        EXPECT_EQ(got.shortest, ref.shortest);
        if (std::string(what) == "moved") {
          EXPECT_EQ(step.repeats(), repeats) << "moved atoms outgrew the capacity";
        }
        repeats = step.repeats();
      }
      EXPECT_EQ(step.capacity().chunks, chunked ? 8 : 1);   // never fewer
      EXPECT_GE(step.repeats(), 1) << "no step outgrew its nets";
      EXPECT_EQ(step.recordings(), 0);
    }
  }
}

TEST(DeviceStep, BadInputAndEmptySteps) {
  const mlip::testing::TempDir dir("mlip_test_device_step_errors");
  const std::string path = (dir.path / "model.pt").string();
  mlip::testing::write_test_model("se_e2_a_md_compressed", path);
  const mlip::Model m = mlip::Model::load(path);
  mlip::DeviceStep step(m, m.info().cutoff, false);
  // Two atoms 0.8 A apart: closer than the compressed tables reach (1 A).
  std::vector<double> x = {0, 0, 0, 0.8, 0, 0};
  std::vector<int64_t> species = {0, 1};
  EXPECT_THROW(
      {
        try {
          step.evaluate(x.data(), 1.0, species.data(), 2, 2, false);
        } catch (const mlip::Error& e) {
          EXPECT_NE(std::string(e.what()).find("closer than its embedding table covers"), std::string::npos) << e.what();
          throw;
        }
      },
      mlip::Error);
  x[3] = 2.0;
  const mlip::StepOutput two = step.evaluate(x.data(), 1.0, species.data(), 2, 2, false);
  EXPECT_NEAR(two.shortest, 2.0, 1e-12);
  EXPECT_EQ(two.n_edges, 2);
  EXPECT_NEAR(two.forces.sum().item<double>(), 0.0, 1e-12);   // Newton's third law
  // Positions in another unit: scale 0.5 of 4.0 is the same step.
  std::vector<double> twice = {0, 0, 0, 4.0, 0, 0};
  EXPECT_TRUE(torch::allclose(step.evaluate(twice.data(), 0.5, species.data(), 2, 2, false).forces, two.forces));
  species[1] = 2;
  EXPECT_THROW(step.evaluate(x.data(), 1.0, species.data(), 2, 2, false), mlip::Error);
  species[1] = 1;
  x[4] = std::nan("");
  EXPECT_THROW(step.evaluate(x.data(), 1.0, species.data(), 2, 2, false), mlip::Error);
  // No centres (only ghosts, or atoms the model skips), no atoms, isolated atoms.
  x[4] = 0;
  EXPECT_EQ(step.evaluate(x.data(), 1.0, species.data(), 2, 0, false).forces.abs().sum().item<double>(), 0.0);
  EXPECT_EQ(step.evaluate(x.data(), 1.0, species.data(), 0, 0, false).forces.numel(), 0);
  x[3] = 10.0;
  const mlip::StepOutput apart = step.evaluate(x.data(), 1.0, species.data(), 2, 2, false);
  EXPECT_EQ(apart.n_edges, 0);
  EXPECT_EQ(apart.forces.abs().sum().item<double>(), 0.0);
  EXPECT_EQ(apart.atom_energy.numel(), 2);
  EXPECT_THROW(mlip::DeviceStep(m, m.info().cutoff, /*record=*/true), mlip::Error);   // not on a GPU
}

// Its backward reads a device value back (as a recorded backward must not).
struct ReadsBackInBackward : torch::autograd::Function<ReadsBackInBackward> {
  static torch::Tensor forward(torch::autograd::AutogradContext* /*ctx*/, const torch::Tensor& x) { return x * 2.0; }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* /*ctx*/,
                                                 torch::autograd::variable_list g) {
    return {g[0] * g[0].sum().item<double>()};
  }
};

// What a CUDA graph cannot record is seen on the CPU: an operator that reads a device value back
// (an item(), nonzero, ...), directly, inside another operator, in TorchScript and in a backward,
// named with what it ran inside; work that reads nothing back passes. ctest sets
// MLIP_CHECK_RECORDABLE=1, so every eager run of a recorded path in these tests is watched too.
TEST(RecordableScope, NamesAnOperatorThatReadsTheDeviceBack) {
  if (!mlip::recordable_checks_on()) GTEST_SKIP() << "MLIP_CHECK_RECORDABLE=1 is not set (ctest sets it)";
  const torch::Tensor x = torch::arange(6, torch::kFloat64).reshape({2, 3});
  const auto message = [](const std::function<void()>& work) {
    mlip::RecordableScope scope("the work");
    work();
    try {
      scope.done();
    } catch (const mlip::Error& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_EQ(message([&] { (x * 2).index_select(0, torch::tensor({1})).sum(0).cumsum(0); }), "");
  EXPECT_NE(message([&] { (void)x.sum().item<double>(); }).find("the work reads a device value back to the host (aten::item)"),
            std::string::npos);
  EXPECT_NE(message([&] { (void)x.index({x > 2.0}); }).find("aten::nonzero"), std::string::npos);
  EXPECT_NE(message([&] { (void)torch::repeat_interleave(torch::tensor({1, 2})); }).find("aten::repeat_interleave"),
            std::string::npos);
  EXPECT_EQ(message([&] { (void)torch::repeat_interleave(torch::tensor({1, 2}), 3); }), "");   // output size given
  // one_hot checks its classes on the host off CUDA only, where num_classes is given
  EXPECT_EQ(message([&] { (void)torch::one_hot(torch::tensor({0, 2}), 3); }), "");
  EXPECT_NE(message([&] { (void)torch::one_hot(torch::tensor({0, 2})); }).find("(aten::one_hot > aten::item)"), std::string::npos)
      << message([&] { (void)torch::one_hot(torch::tensor({0, 2})); });
  auto cu = torch::jit::compile(R"(
def scaled(x: Tensor) -> Tensor:
    return x * int(x.sum())
)");
  EXPECT_NE(message([&] { cu->run_method("scaled", x); }).find("(scaled > aten::item)"), std::string::npos)
      << message([&] { cu->run_method("scaled", x); });
  // A backward (on this thread, as autograd runs CPU tensors'): named with its node.
  const torch::Tensor w = x.clone().requires_grad_(true);
  EXPECT_EQ(message([&] { torch::autograd::grad({(w * w).sum()}, {w}); }), "");
  const std::string in_backward = message([&] { torch::autograd::grad({ReadsBackInBackward::apply(w).sum()}, {w}); });
  EXPECT_NE(in_backward.find("ReadsBackInBackward"), std::string::npos) << in_backward;
  EXPECT_NE(in_backward.find("ReadsBackInBackward> > aten::item)"), std::string::npos) << in_backward;
  // A scope inside another watches nothing of its own; after done() a new one watches.
  mlip::RecordableScope outer("outer");
  {
    mlip::RecordableScope inner("inner");
    (void)x.sum().item<double>();
    EXPECT_NO_THROW(inner.done());
  }
  EXPECT_THROW(outer.done(), mlip::Error);
  EXPECT_NE(message([&] { (void)x.sum().item<double>(); }), "");   // a new scope watches again
}

// A GPU runs a kernel's elements in any order and at once, the CPU's loop in order: every device
// kernel (MACE's, PaiNN's and the compressed model's operators, scaled_silu's, tanh_net's, the graph's,
// and the whole step's with plain and compressed se_e2_a, PaiNN and MACE in one chunk and in several,
// which also shows that the device kernels' path of the step reads nothing back) gives the same
// bits with its elements run last to first, so that none reads what another element of its launch
// writes and no two write one place (what ctest's loop would otherwise never show).
TEST(DeviceKernels, ResultsDoNotDependOnTheElementsOrder) {
  const mlip::KernelChoiceScope use(mlip::KernelChoice::device_kernels);
  const auto both_orders = [](const std::string& what, const std::function<std::vector<torch::Tensor>()>& run) {
    const std::vector<torch::Tensor> in_order = run();
    std::vector<torch::Tensor> reversed;
    {
      const mlip::detail::ReversedElements last_first;
      reversed = run();
    }
    ASSERT_EQ(in_order.size(), reversed.size()) << what;
    for (std::size_t k = 0; k < in_order.size(); ++k)
      EXPECT_TRUE(torch::equal(in_order[k], reversed[k])) << what << ": output " << k << " differs";
  };
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    const std::string type = dtype == torch::kFloat64 ? " (float64)" : " (float32)";
    const auto mace = mlip::mace_inputs(dtype), edge = mlip::edge_inputs(dtype);
    both_orders("MACE's operators" + type, [&] { return mlip::mace_operator_outputs(mace, torch::kCPU); });
    both_orders("PaiNN's and the compressed model's operators" + type,
                [&] { return mlip::edge_operator_outputs(edge, torch::kCPU); });
    const torch::Tensor v = torch::randn({5000}, dtype) * 4;
    both_orders("scaled_silu and its derivatives" + type, [&] {
      const torch::Tensor vg = v.clone().requires_grad_(true);
      const torch::Tensor y = mlip::scaled_silu(vg, 1.7);
      const torch::Tensor g = torch::autograd::grad({(y * y * y).sum()}, {vg}, {}, true, true)[0];
      const torch::Tensor h = torch::autograd::grad({(g * g).sum()}, {vg})[0];
      return std::vector<torch::Tensor>{y.detach(), g.detach(), h};
    });
    torch::manual_seed(3);
    const std::vector<torch::Tensor> params = {torch::randn({1, 25}, dtype), torch::randn({25}, dtype),
                                               torch::randn({25, 50}, dtype) * 0.3, torch::randn({50}, dtype)};
    const torch::Tensor r = torch::rand({3000}, dtype) * 3;
    both_orders("se_environment and its derivatives" + type,
                [&] { return mlip::environment_outputs(dtype, torch::kCPU); });
    both_orders("tanh_net" + type, [&] {
      const torch::NoGradGuard no_grad;
      const auto [y, y_dx] = mlip::tanh_net(r, params, {0, 2});
      return std::vector<torch::Tensor>{y, y_dx};
    });
  }
  const Atoms a = random_atoms(600, 15.0, 3);
  const torch::Tensor x = torch::tensor(a.x, torch::kFloat64).view({600, 3});
  const torch::Tensor species = torch::tensor(a.species, torch::kInt64);
  both_orders("the device graph", [&] {
    const mlip::DeviceGraph g = mlip::DeviceGraphBuilder(x, species, 3.0).build(100, 400, 2);
    return std::vector<torch::Tensor>{g.node_atom, g.species, g.edge_index, g.edge_vectors};
  });
  const mlip::testing::TempDir dir("mlip_test_element_order");
  for (const auto& [name, spread] : {std::pair{"se_e2_a", 1.0}, std::pair{"se_e2_a_md_compressed", 1.7},
                                     std::pair{"painn3", 1.0}, std::pair{"mace", 1.0}}) {
    const std::string path = (dir.path / (std::string(name) + ".pt")).string();
    mlip::testing::write_test_model(name, path);
    const mlip::Model m = mlip::Model::load(path);
    Atoms b = random_atoms(700, 16.0, 4);
    for (double& v : b.x) v *= spread;
    for (const int64_t chunk : {int64_t{0}, int64_t{90}})
      both_orders(std::string(name) + "'s whole step in chunks of " + std::to_string(chunk), [&] {
        mlip::DeviceStep step(m, m.info().cutoff, /*record=*/false);
        const mlip::StepOutput o = step.evaluate(b.x.data(), 1.0, b.species.data(), 700, 500, true, chunk);
        return std::vector<torch::Tensor>{o.atom_energy, o.forces, o.virial, o.atom_virial};
      });
  }
}

// The recorded step (one CUDA graph: cells, edges, model, forces) on the GPU against the eager step
// on the CPU in the same chunks, float64, plain and compressed se_e2_a (its atoms spread to stay
// within the tables), PaiNN of 3 layers and MACE (message passing: each chunk with its halo), with
// the operators' device kernels (the step's choice on a GPU) and their ATen formulations: moved atoms
// (other edges) replay the recording, also after a step with per-atom virials (unrecorded), and so
// do fewer atoms (ghosts lost, local atoms and chunks' halos changed, as at a reneighbouring); more
// atoms and a denser box record anew.
TEST(DeviceStepGpu, RecordedStepsEqualTheCpu) {
  if (const std::string why = mlip::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const mlip::testing::TempDir dir("mlip_test_device_step_gpu");
  for (const auto& [name, spread] :
       {std::pair{"se_e2_a", 1.0}, std::pair{"se_e2_a_md_compressed", 1.7}, std::pair{"painn3", 1.0},
        std::pair{"mace", 1.0}}) {
    const std::string path = (dir.path / (std::string(name) + ".pt")).string();
    mlip::testing::write_test_model(name, path);
    const mlip::Model cpu = mlip::Model::load(path);
    const mlip::Model gpu = mlip::Model::load(path, mlip::choose_device("cuda", 0, "test"));
    const auto atoms = [s = spread](int n, double side, unsigned seed, double squeeze) {
      Atoms a = random_atoms(n, side, seed);
      for (double& v : a.x) v *= s * squeeze;
      return a;
    };
    // The first atoms each moved by up to 0.03 Å along each axis (the last `lost` of them dropped):
    // within the recording's capacities, so a replay must read the new positions (a stale input or
    // a value fixed at recording would give the first step's results; the edges differ too).
    const auto moved = [&](unsigned seed, int lost = 0) {
      Atoms a = atoms(3000, 30.0, 9, 1.0);
      std::mt19937 rng(seed);
      std::uniform_real_distribution<double> u(-0.03, 0.03);
      for (double& v : a.x) v += u(rng);
      a.x.resize(a.x.size() - 3 * static_cast<std::size_t>(lost));
      a.species.resize(a.species.size() - static_cast<std::size_t>(lost));
      return a;
    };
    // Steps: a name, the atoms, and whether per-atom virials are asked (a dump step: run unrecorded
    // between two replays, which must still replay the recording).
    const std::vector<std::tuple<const char*, Atoms, bool>> steps = {
        {"first", atoms(3000, 30.0, 9, 1.0), false}, {"moved", moved(1), false},
        {"per-atom virials", moved(2), true},        {"moved after it", moved(3), false},
        {"fewer atoms", moved(4, 10), false},        {"more atoms", atoms(4000, 33.0, 10, 1.0), false},
        {"denser", atoms(3000, 30.0, 9, 0.9), false}};
    // Device kernels (in one chunk and in chunks of at most 700 local atoms) and ATen formulations.
    for (const auto& [choice, chunk] : {std::pair{mlip::KernelChoice::usual, int64_t{0}},
                                        std::pair{mlip::KernelChoice::usual, int64_t{700}},
                                        std::pair{mlip::KernelChoice::aten, int64_t{0}}}) {
      const mlip::KernelChoiceScope kernels(choice);
      const std::string what = std::string(name) + (choice == mlip::KernelChoice::usual ? ", device kernels" : ", aten") +
                               (chunk > 0 ? ", chunks of 700" : "");
      mlip::DeviceStep eager(cpu, cpu.info().cutoff, false);   // the same chunks: the same edges
      mlip::DeviceStep recorded(gpu, gpu.info().cutoff, true);
      int64_t told = 0;   // before_recording's calls: one before each recording
      recorded.before_recording([&] { ++told; });
      std::vector<int64_t> recordings, edges;
      for (const auto& [step, a, per_atom] : steps) {
        const int64_t n = static_cast<int64_t>(a.species.size()), n_local = n * 2 / 3;
        const mlip::StepOutput c = eager.evaluate(a.x.data(), 1.0, a.species.data(), n, n_local, per_atom, chunk);
        const mlip::StepOutput g = recorded.evaluate(a.x.data(), 1.0, a.species.data(), n, n_local, per_atom, chunk);
        const double de = relative(g.atom_energy, c.atom_energy), df = relative(g.forces, c.forces),
                     dv = relative(g.virial, c.virial);
        if (per_atom) {
          EXPECT_LE(relative(g.atom_virial, c.atom_virial), 1e-10) << what << ", " << step;
        }
        std::printf("device step (%s, %s): %lld atoms, %lld edges, recorded %lld time(s), %lld repeat(s); relative "
                    "difference GPU vs CPU: energies %.3g, forces %.3g, virial %.3g\n",
                    what.c_str(), step, static_cast<long long>(n), static_cast<long long>(g.n_edges),
                    static_cast<long long>(recorded.recordings()), static_cast<long long>(recorded.repeats()), de, df, dv);
        EXPECT_EQ(g.n_edges, c.n_edges) << what << ", " << step;
        EXPECT_LE(de, 1e-10) << what << ", " << step;
        EXPECT_LE(df, 1e-10) << what << ", " << step;
        EXPECT_LE(dv, 1e-10) << what << ", " << step;
        recordings.push_back(recorded.recordings());
        edges.push_back(c.n_edges);
      }
      EXPECT_NE(edges[1], edges[0]) << what << ": the moved atoms have the first step's edges";
      EXPECT_EQ(recorded.capacity().chunks, chunk > 0 ? 4 : 1) << what;   // 2666 local atoms
      EXPECT_GT(recorded.memory().bytes, 0) << what;
      std::printf("device step (%s): the last recording took %.1f MiB, %lld centres and %lld edges a chunk\n",
                  what.c_str(), static_cast<double>(recorded.memory().bytes) / (1 << 20),
                  static_cast<long long>(recorded.memory().centres), static_cast<long long>(recorded.memory().edges));
      EXPECT_EQ(recordings[0], 1) << what;
      EXPECT_EQ(recordings[4], 1) << what << ": moved atoms (a dump step, fewer atoms) were recorded anew";
      EXPECT_GT(recordings[6], recordings[4]) << what;
      EXPECT_EQ(told, recorded.recordings()) << what;
      EXPECT_EQ(recorded.measurements(), recorded.recordings()) << what;
      // The same step eager on the GPU ('cuda_graph eager'): its first step at each capacity
      // measured as a recording is, so that the pair style can size it.
      mlip::DeviceStep unrecorded(gpu, gpu.info().cutoff, false);
      const Atoms& a = std::get<1>(steps[0]);
      const int64_t n = static_cast<int64_t>(a.species.size());
      for (int k = 0; k < 2; ++k) unrecorded.evaluate(a.x.data(), 1.0, a.species.data(), n, n * 2 / 3, false, chunk);
      EXPECT_EQ(unrecorded.measurements(), 1 + unrecorded.repeats()) << what;   // one per capacity
      EXPECT_GT(unrecorded.memory().bytes, 0) << what;
    }
  }
}

TEST(DeviceGraphGpu, TheGpuBuildsTheCpusGraph) {
  if (const std::string why = mlip::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  Atoms a = random_atoms(3000, 30.0, 6);
  for (const bool far_atom : {false, true}) {
    if (far_atom) {   // a ghost far from the rest: the grid's cells hashed
      a.x.insert(a.x.end(), {3e4, -1e4, 5e3});
      a.species.push_back(1);
    }
    const int n = static_cast<int>(a.species.size());
    const torch::Tensor x = torch::tensor(a.x, torch::kFloat64).view({n, 3});
    const torch::Tensor species = torch::tensor(a.species, torch::kInt64);
    for (const auto& [first, last, hops] : {std::tuple{0, 2000, 1}, {0, 2000, 3}, {700, 1100, 2}}) {
      const mlip::DeviceGraph cpu = mlip::DeviceGraphBuilder(x, species, 4.0).build(first, last, hops);
      const mlip::DeviceGraph gpu = mlip::DeviceGraphBuilder(x.cuda(), species.cuda(), 4.0).build(first, last, hops);
      EXPECT_EQ(gpu.n_centers, cpu.n_centers);
      // The same order on every device: equal, not just the same edges.
      EXPECT_TRUE(torch::equal(gpu.node_atom.cpu(), cpu.node_atom));
      EXPECT_TRUE(torch::equal(gpu.species.cpu(), cpu.species));
      EXPECT_TRUE(torch::equal(gpu.edge_index.cpu(), cpu.edge_index));
      EXPECT_TRUE(torch::equal(gpu.edge_vectors.cpu(), cpu.edge_vectors));
      std::printf("device graph%s: centres %d-%d, %lld edges, %lld nodes, %d hops: GPU = CPU\n",
                  far_atom ? " with a far atom" : "", first, last, static_cast<long long>(cpu.n_edges()),
                  static_cast<long long>(cpu.n_nodes()), hops);
    }
  }
}

// A call whose atoms have no neighbour (an isolated atom; a dilute gas; a chunk of them): the
// graph's empty arrays may have null pointers, which CUDA's pointer lookup refuses (the graph is
// wrapped without one). Energies on the GPU equal the CPU's; no forces.
TEST(DeviceGraphGpu, AGraphOfNoEdgesEvaluates) {
  if (const std::string why = mlip::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const mlip::testing::TempDir dir("mlip_test_device_no_edges");
  const std::string path = (dir.path / "model.pt").string();
  mlip::testing::write_test_model("se_e2_a", path);
  const mlip::Model cpu = mlip::Model::load(path);
  const mlip::Model gpu = mlip::Model::load(path, mlip::choose_device("cuda", 0, "test"));
  const torch::Tensor x = torch::tensor({0.0, 0.0, 0.0, 40.0, 0.0, 0.0}, torch::kFloat64).view({2, 3});
  const torch::Tensor species = torch::tensor({0, 1}, torch::kInt64);
  const double cutoff = cpu.info().cutoff;
  const mlip::DeviceGraph on_cpu = mlip::build_device_graph(x, species, 2, cutoff, 1);
  const mlip::DeviceGraph on_gpu = mlip::build_device_graph(x.cuda(), species.cuda(), 2, cutoff, 1);
  ASSERT_EQ(on_gpu.n_edges(), 0);
  const mlip::ModelOutput a = mlip::evaluate_graph(cpu, on_cpu.view()), b = mlip::evaluate_graph(gpu, on_gpu.view());
  ASSERT_EQ(b.atom_energy.numel(), 2);
  EXPECT_TRUE(torch::allclose(b.atom_energy.cpu(), a.atom_energy, 1e-12, 1e-12));
  mlip::EdgeForceRequest request;
  request.virial = true;
  const mlip::EdgeForces f = mlip::edge_forces(on_gpu.view(), b.edge_grad, request);
  EXPECT_EQ(f.forces.abs().sum().item<double>(), 0.0);
}

// tanh_net's device kernel (the uncompressed se_e2_a embedding in MD) on the GPU against the CPU:
// DeePMD's 25-50-100 net, values, dy/dx and the gradient with respect to x.
TEST(DeviceKernelsGpu, TanhNetEqualsTheCpu) {
  if (const std::string why = mlip::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const std::vector<int64_t> widths = {1, 25, 50, 100}, residual = {0, 2, 2};
  for (const auto dtype : {torch::kFloat64, torch::kFloat32}) {
    torch::manual_seed(8);
    std::vector<torch::Tensor> params;
    for (std::size_t l = 0; l + 1 < widths.size(); ++l) {
      params.push_back(torch::randn({widths[l], widths[l + 1]}, torch::dtype(dtype)) * 0.4);
      params.push_back(torch::randn({widths[l + 1]}, torch::dtype(dtype)));
    }
    const torch::Tensor x = torch::rand({20000}, torch::dtype(dtype)) * 3;
    const torch::Tensor weight = torch::randn({20000, 100}, torch::dtype(dtype));
    auto run = [&](const torch::Device& device) {
      std::vector<torch::Tensor> p;
      for (const auto& t : params) p.push_back(t.to(device));
      const torch::Tensor xg = x.to(device).requires_grad_(true);
      const auto [y, y_dx] = mlip::tanh_net(xg, p, residual);
      const torch::Tensor gx = torch::autograd::grad({(y * weight.to(device)).sum()}, {xg})[0];
      return std::vector<torch::Tensor>{y.detach().cpu(), y_dx.cpu(), gx.cpu()};
    };
    const auto cpu = run(torch::kCPU), gpu = run(torch::Device(torch::kCUDA, 0));
    double worst = 0;
    for (std::size_t k = 0; k < cpu.size(); ++k)
      worst = std::max(worst, (gpu[k] - cpu[k]).abs().max().item<double>() / cpu[k].abs().max().item<double>());
    EXPECT_LE(worst, dtype == torch::kFloat64 ? 1e-12 : 1e-4) << dtype;
    std::printf("device kernels: tanh_net %s relative difference GPU vs CPU %.3g\n",
                dtype == torch::kFloat64 ? "float64" : "float32", worst);
  }
}

// 'timing kernels' and --profile (mlip/model/kernel_profile.h): LibTorch's profiler summarised.
namespace {
const mlip::ProfileRow* profile_row(const mlip::ProfileSummary& s, const std::string& kind, const std::string& name) {
  for (const auto& r : s.rows)
    if (r.kind == kind && r.name == name) return &r;
  return nullptr;
}
}  // namespace

TEST(KernelProfile, HostOperatorsCountedOnceEachByTheirSelfTime) {
  const torch::Tensor a = torch::rand({96, 96}, torch::kFloat64);
  mlip::ProfileSummary s;
  {
    mlip::KernelProfile profile(torch::kCPU);
    EXPECT_THROW({ mlip::KernelProfile second(torch::kCPU); }, mlip::Error);   // one at a time
    torch::Tensor b = a;
    for (int i = 0; i < 5; ++i) b = torch::matmul(b, a).tanh();   // matmul calls mm: nested
    s = profile.stop();
  }
  const mlip::ProfileRow* mm = profile_row(s, "operator", "aten::mm");
  const mlip::ProfileRow* tanh = profile_row(s, "operator", "aten::tanh");
  ASSERT_NE(mm, nullptr);
  ASSERT_NE(tanh, nullptr);
  EXPECT_EQ(mm->calls, 5);
  EXPECT_EQ(tanh->calls, 5);
  EXPECT_GT(mm->seconds, 0.0);
  // Self times: nested operators are not counted twice, so they sum to at most the wall time.
  EXPECT_LE(s.seconds("operator"), s.wall_seconds);
  EXPECT_GT(s.wall_seconds, 0.0);
  EXPECT_EQ(s.kernels, 0);          // no GPU asked for
  EXPECT_EQ(s.gpu_seconds, 0.0);
  EXPECT_EQ(s.launches, 0);
  const std::string text = mlip::format_profile(s, "x: ", 5, "call");
  EXPECT_NE(text.find("x: wall "), std::string::npos) << text;
  EXPECT_NE(text.find("aten::mm"), std::string::npos) << text;
  EXPECT_EQ(text.find("GPU busy"), std::string::npos) << text;
  EXPECT_EQ(text.find("no GPU activity"), std::string::npos) << text;   // none asked for
  // A GPU profiled without any of its activity (CUPTI unavailable): said, not shown as a CPU's.
  mlip::ProfileSummary empty_gpu = s;
  empty_gpu.gpu = true;
  EXPECT_NE(mlip::format_profile(empty_gpu, "x: ", 5, "call").find("no GPU activity recorded"), std::string::npos);
  // The profiler is free again for the next one.
  mlip::KernelProfile again(torch::kCPU);
  EXPECT_TRUE(again.running());
  (void)again.stop();
  EXPECT_FALSE(again.running());
}

// The operators doing work (a GPU's kernels, estimated on the CPU): the leaves of the operator
// tree less views and allocations, a foreach operator once (one launch on a GPU, a loop here).
TEST(KernelProfile, OperatorsDoingWorkAreTheLeavesAndAForeachOnce) {
  const torch::Tensor a = torch::rand({32, 32}, torch::kFloat64);
  std::vector<torch::Tensor> three = {torch::zeros({4}), torch::zeros({5}), torch::zeros({6})};
  mlip::ProfileSummary s;
  {
    mlip::KernelProfile profile(torch::kCPU);
    torch::Tensor b = a;
    for (int i = 0; i < 4; ++i) b = torch::matmul(b, a).tanh();   // matmul > mm: mm counts
    (void)b.view({-1}).narrow(0, 0, 8).unsqueeze(0).t();          // views only: none
    (void)torch::empty({16});                                     // an allocation: none
    at::_foreach_add_(three, 1.0);                                // once, not once a tensor
    s = profile.stop();
  }
  EXPECT_EQ(s.work_operators, 9);
  const mlip::ProfileRow* mm = profile_row(s, "work", "aten::mm");
  const mlip::ProfileRow* foreach = profile_row(s, "work", "aten::_foreach_add_");
  ASSERT_NE(mm, nullptr);
  ASSERT_NE(foreach, nullptr);
  EXPECT_EQ(mm->calls, 4);
  EXPECT_EQ(foreach->calls, 1);
  EXPECT_EQ(profile_row(s, "work", "aten::matmul"), nullptr);
  EXPECT_EQ(profile_row(s, "work", "aten::view"), nullptr);
  const std::string text = mlip::format_profile(s, "x: ", 1, "call");
  EXPECT_NE(text.find("9.0 operators doing work (a GPU's kernels, estimated)"), std::string::npos) << text;
}

// The profile is of the thread that started it (and of the threads that take on its state, as
// autograd's do): a thread beside it, such as the trainer's prefetching thread, has its operators
// left out, so that they never read as the step's host time. LibTorch's choice, checked here
// because the step tables rely on it. (The CUDA calls that CUPTI records are process-wide.)
TEST(KernelProfile, OperatorsOfAThreadBesideAreLeftOut) {
  const torch::Tensor a = torch::rand({64, 64}, torch::kFloat64);
  mlip::ProfileSummary s;
  {
    mlip::KernelProfile profile(torch::kCPU);
    std::thread beside([&] {
      for (int i = 0; i < 5; ++i) (void)a.cumsum(0);
    });
    beside.join();
    for (int i = 0; i < 5; ++i) (void)a.exp();
    s = profile.stop();
  }
  EXPECT_NE(profile_row(s, "operator", "aten::exp"), nullptr);
  EXPECT_EQ(profile_row(s, "operator", "aten::cumsum"), nullptr);
}

TEST(KernelProfileGpu, KernelsCopiesLaunchesAndWaits) {
  if (const std::string why = mlip::testing::gpu_skip_reason(); !why.empty()) GTEST_SKIP() << why;
  const torch::Device gpu(torch::kCUDA, 0);
  const torch::Tensor a = torch::rand({512, 512}, torch::kFloat64).to(gpu);
  (void)torch::matmul(a, a).tanh().sum().item<double>();   // cuBLAS's handle, the allocator's first blocks
  mlip::KernelProfile profile(gpu);
  torch::Tensor b = a;
  for (int i = 0; i < 5; ++i) b = torch::matmul(b, a).tanh();
  const double sum = b.sum().item<double>();   // a copy back and a wait
  const mlip::ProfileSummary s = profile.stop();
  std::printf("kernel profile on the GPU:\n%s", mlip::format_profile(s, "  ", 5, "call").c_str());
  EXPECT_TRUE(std::isfinite(sum));
  EXPECT_GE(s.kernels, 11);                  // 5 products, 5 tanh, the sum
  EXPECT_GE(s.launches, 6);                  // tanh and the sum at least (cuBLAS may go by the driver)
  EXPECT_GE(s.waits, 1);
  EXPECT_GT(s.gpu_seconds, 0.0);
  EXPECT_LE(s.gpu_seconds, s.wall_seconds);
  EXPECT_GT(s.seconds("copy"), 0.0);
  bool tanh = false;
  for (const auto& r : s.rows) tanh = tanh || (r.kind == "kernel" && r.name.find("tanh") != std::string::npos);
  EXPECT_TRUE(tanh) << "no kernel named after tanh";
}
