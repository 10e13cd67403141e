// Forward + force evaluation time per atom of each architecture on liquid water (frame 0 of
// data/water-deepmd/data_0 replicated to 1536 and 12288 atoms), float32 and float64, with the
// model's matrix-product FLOPs per atom-step and the fraction of this machine's measured GEMM
// rate that they reach. The model is the frozen export, loaded back, and evaluation goes
// through ChunkGraph + evaluate_chunk with pair_style mlip's chunking: local models in runs of
// consecutive atoms (default chunks 64, 256 and all), message-passing models in spatially compact
// chunks (split_compact) with their (L-1)-hop halo (default 128).
//
//   build/bin/bench_potentials [--threads N] [--repeats N] [--arch NAME] [--dtype float32|float64]
//                              [--atoms 1536|12288] [--chunk N] [--profile PREFIX]
//
// --arch, --dtype, --atoms, --chunk run only those cases; --profile writes one more pass of each case under
// LibTorch's profiler to PREFIX.<arch>.<dtype>.<atoms>.<chunk>.json (chrome://tracing format;
// benchmarks/profile_summary.py sums it by operator).
//
// FLOPs count matrix products only (2 m n k), forward pass; a force evaluation is counted as
// twice the forward (the backward pass needs one input-gradient product per forward product, no
// weight gradients). Element-wise work (tanh, products, index_add) is not counted, nor is the
// work a message-passing chunk spends on its halo (which makes small chunks slower).
#include <ATen/Parallel.h>
#include <torch/csrc/autograd/profiler_legacy.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <unistd.h>

#include "mlip/graph/chunk_graph.h"
#include "mlip/data/io.h"
#include "mlip/graph/neighbor_list.h"
#include "mlip/potentials.h"
#include "mlip/model/runtime.h"
#include "support/source_dir.h"

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// The machine's GEMM rate: the best of 5 products at each of n = 512, 1024 and 2048 (float64
// rates here vary from run to run by up to 2x; the best is the peak the fractions refer to).
double gemm_gflops(torch::Dtype dtype) {
  double rate = 0.0;
  for (int64_t n : {512, 1024, 2048}) {
    const auto a = torch::randn({n, n}, torch::TensorOptions().dtype(dtype));
    const auto b = torch::randn({n, n}, torch::TensorOptions().dtype(dtype));
    torch::mm(a, b);
    for (int k = 0; k < 5; ++k) {
      const auto t0 = Clock::now();
      const auto c = torch::mm(a, b);
      rate = std::max(rate, 2.0 * n * n * n / seconds_since(t0) / 1e9);
    }
  }
  return rate;
}

// Forward matrix-product FLOPs per atom.
double forward_flops_per_atom(const mlip::ModelMetadata& m, double edges_per_atom) {
  const auto& hp = m.hyperparameters;
  double flops = 0;
  if (m.architecture == "se_e2_a") {
    std::vector<int64_t> emb = {1};
    for (auto w : hp["embedding"]) emb.push_back(w.get<int64_t>());
    const int64_t m1 = emb.back(), m2 = hp["axis_neurons"].get<int64_t>();
    for (std::size_t l = 0; l + 1 < emb.size(); ++l) flops += edges_per_atom * 2.0 * emb[l] * emb[l + 1];
    flops += edges_per_atom * 2.0 * 4 * m1;  // T_i = sum_j env (x) G
    flops += 2.0 * 4 * m1 * m2;              // D_i = T^T T<
    std::vector<int64_t> fit = {m1 * m2};
    for (auto w : hp["fitting"]) fit.push_back(w.get<int64_t>());
    fit.push_back(1);
    for (std::size_t l = 0; l + 1 < fit.size(); ++l) flops += 2.0 * fit[l] * fit[l + 1];
  } else if (m.architecture == "painn") {
    const double f = hp["features"].get<int64_t>(), nrbf = hp["radial_basis"].get<int64_t>();
    const double layers = hp["layers"].get<int64_t>();
    const double per_layer = 2.0 * (f * f + f * 3 * f)            // phi
                             + edges_per_atom * 2.0 * nrbf * 3 * f  // filters
                             + 2.0 * 2 * 3 * f * f                  // U v, V v
                             + 2.0 * (2 * f * f + f * 3 * f);       // update MLP
    flops = layers * per_layer + 2.0 * (f * f / 2 + f / 2);
  }
  return flops;
}

}  // namespace

int main(int argc, char** argv) {
  mlip::prefer_avx512_kernels();  // before any tensor operation
  mlip::keep_freed_memory();       // as pair_style mlip and mlip-trainer do
  int threads = 1, repeats = 3, only_atoms = 0, only_chunk = 0;
  std::string only_arch, only_dtype, profile;
  for (int a = 1; a < argc; ++a) {
    if (!std::strcmp(argv[a], "--threads") && a + 1 < argc) threads = std::atoi(argv[++a]);
    else if (!std::strcmp(argv[a], "--repeats") && a + 1 < argc) repeats = std::atoi(argv[++a]);
    else if (!std::strcmp(argv[a], "--arch") && a + 1 < argc) only_arch = argv[++a];
    else if (!std::strcmp(argv[a], "--dtype") && a + 1 < argc) only_dtype = argv[++a];
    else if (!std::strcmp(argv[a], "--atoms") && a + 1 < argc) only_atoms = std::atoi(argv[++a]);
    else if (!std::strcmp(argv[a], "--chunk") && a + 1 < argc) only_chunk = std::atoi(argv[++a]);
    else if (!std::strcmp(argv[a], "--profile") && a + 1 < argc) profile = argv[++a];
    else {
      std::fprintf(stderr,
                   "usage: %s [--threads N] [--repeats N] [--arch se_e2_a|painn|mace] [--dtype float32|float64] "
                   "[--atoms 1536|12288] [--chunk N] [--profile PREFIX]\n",
                   argv[0]);
      return 2;
    }
  }
  at::set_num_threads(threads);
  const double gemm64 = gemm_gflops(torch::kFloat64), gemm32 = gemm_gflops(torch::kFloat32);
  std::printf("LibTorch %d thread(s), %s kernels; measured GEMM (best of n = 512, 1024, 2048): float64 %.1f GFLOP/s, "
              "float32 %.1f GFLOP/s\n",
              threads, mlip::cpu_capability().c_str(), gemm64, gemm32);
  std::printf("Forward+forces per atom-step; FLOPs = matrix products, force step = 2 x forward; 'GEMM now': the\n"
              "GEMM rate measured again right after the case, which 'of GEMM' refers to (this machine's speed drifts)\n");
  std::printf("%-8s %-8s %6s %6s %11s %13s %10s %9s %9s\n", "model", "dtype", "atoms", "chunk", "us/atom", "MFLOP/atom",
              "GFLOP/s", "GEMM now", "of GEMM");

  const mlip::Structure frame = mlip::read_deepmd(mlip::testing::source_dir() + "/data/water-deepmd/data_0").at(0);
  struct Arch {
    std::string name;
    nlohmann::json hp;
  };
  // mace: the shape of bench_mace.sh's comparison with mace-torch (32 channels, max_L 1, correlation 3).
  const std::vector<Arch> archs = {
      {"se_e2_a", nlohmann::json::object()},
      {"painn", nlohmann::json::object()},
      {"mace", {{"num_channels", 32}, {"max_L", 1}, {"correlation", 3}, {"avg_num_neighbors", 30.0}}}};
  const double cutoff = 6.0;
  for (int reps : {2, 4}) {
    if (only_atoms > 0 && static_cast<std::size_t>(only_atoms) != frame.size() * reps * reps * reps) continue;
    const mlip::Structure s = mlip::replicate(frame, reps, reps, reps);
    const mlip::NeighborList nl = mlip::build_neighbor_list(s, cutoff);
    std::vector<int64_t> first(s.size() + 1, 0);  // CSR over the centre-sorted edges
    for (auto c : nl.centers) ++first[c + 1];
    for (std::size_t i = 0; i < s.size(); ++i) first[i + 1] += first[i];
    const double edges_per_atom = double(nl.size()) / s.size();
    for (const auto& arch : archs) {
      if (!only_arch.empty() && arch.name != only_arch) continue;
      for (torch::Dtype dtype : {torch::kFloat32, torch::kFloat64}) {
        const std::string dtype_name = dtype == torch::kFloat32 ? "float32" : "float64";
        if (!only_dtype.empty() && dtype_name != only_dtype) continue;
        mlip::ModelSpec spec;
        spec.architecture = arch.name;
        spec.species = {"O", "H"};
        spec.cutoff = cutoff;
        spec.dtype = dtype_name;
        spec.hyperparameters = arch.hp;
        mlip::BuiltModel built = mlip::build_model(spec);
        // What pair_style mlip runs: the frozen export, loaded back.
        const std::string model_file = "/tmp/mlip_bench_" + std::to_string(::getpid()) + ".pt";
        mlip::export_frozen(built.module, built.metadata, model_file);
        const mlip::Model model = mlip::Model::load(model_file, torch::kCPU);
        std::remove(model_file.c_str());
        const int layers = built.metadata.message_passing_layers;
        const double flops = 2.0 * forward_flops_per_atom(built.metadata, edges_per_atom);
        std::vector<int> chunks = {64, 256, static_cast<int>(s.size())};
        if (layers > 1) chunks = {128};
        if (only_chunk > 0) chunks = {only_chunk};
        for (int chunk : chunks) {
          mlip::ChunkGraph graph;
          std::vector<int> order(s.size()), chunk_end;
          for (std::size_t i = 0; i < s.size(); ++i) order[i] = static_cast<int>(i);
          if (layers > 1) {
            mlip::split_compact(order, chunk, [&](int i) { return s.positions[i].data(); }, chunk_end);
          } else {
            for (std::size_t a = chunk; a < s.size(); a += chunk) chunk_end.push_back(static_cast<int>(a));
            chunk_end.push_back(static_cast<int>(s.size()));
          }
          // Periodic images of an atom share its node: they have the same environment.
          auto run_once = [&] {
            for (std::size_t c = 0; c < chunk_end.size(); ++c) {
              graph.build(
                  order.data() + (c == 0 ? 0 : chunk_end[c - 1]), order.data() + chunk_end[c],
                  static_cast<int>(s.size()), cutoff, [&](int i) { return s.numbers[i] == 8 ? 0 : 1; },
                  [&](int i, auto&& visit) {
                    for (int64_t e = first[i]; e < first[i + 1]; ++e)
                      visit(static_cast<int>(nl.neighbors[e]), nl.vectors[e][0], nl.vectors[e][1], nl.vectors[e][2]);
                  },
                  std::max(layers, 1));
              mlip::evaluate_chunk(model, graph);
            }
          };
          run_once();  // warm-up: the JIT optimises the graph on the first calls
          run_once();
          double best = 1e30;
          for (int k = 0; k < repeats; ++k) {
            const auto t0 = Clock::now();
            run_once();
            best = std::min(best, seconds_since(t0));
          }
          const double per_atom = best / s.size();
          const double gemm = gemm_gflops(dtype);
          std::printf("%-8s %-8s %6zu %6d %11.1f %13.2f %10.1f %9.1f %8.1f%%\n", arch.name.c_str(), dtype_name.c_str(),
                      s.size(), chunk, 1e6 * per_atom, flops / 1e6, flops / per_atom / 1e9, gemm,
                      100.0 * flops / per_atom / 1e9 / gemm);
          std::fflush(stdout);
          if (!profile.empty()) {
            const std::string file = profile + "." + arch.name + "." + dtype_name + "." + std::to_string(s.size()) +
                                     "." + std::to_string(chunk) + ".json";
            {
              torch::autograd::profiler::RecordProfile guard(file);
              run_once();
            }
            std::printf("  profile: %s\n", file.c_str());
          }
        }
      }
    }
  }
  return 0;
}
