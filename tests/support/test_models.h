// Named models for the LAMMPS tests and benchmarks, written deterministically (fixed seeds, fixed
// statistics), so that test_pair_mlip, the LAMMPS force-style YAML cases (tests/lammps/) and
// benchmarks/bench_pair.sh all use the same files:
//
//   morse64, morse32   Morse pair model (support/morse_model.h), H O, rc 3.5
//   se_e2_a            small se_e2_a (local), H O, rc 3.5, random weights, non-trivial scale/shift
//   painn              small PaiNN with 2 message-passing layers, H O, rc 3.0, same
//   painn3             the same with 3 layers
//   mace, mace3        small MACE (4 channels, max_L 1, max_ell 2, correlation 3) with 2 and 3
//                      interactions, H O, rc 3.0, random weights and energy buffers
//   mace32             the 2-interaction one in float32
//   mace_heads         the 2-interaction one with three heads a, b, c (b the default)
//   morse_md           Morse binding for the NVE test: H O, rc 5.0, alpha 1.6 / A, r0 2.6 A
//   se_e2_a_md         se_e2_a perturbation for the NVE test: H O, rc 4.0, energy scale 0.03-0.05
//   se_e2_a_md_compressed  the same, compressed (mlip-trainer compress, tables down to 1 A)
//   se_e2_a_md_scaled  the same, its energy scaled by 1.001 (a 0.1% error, for the NVE test)
//   se_e2_a_water64    se_e2_a with default hyperparameters (rc 6, embedding 25-50-100, fitting
//   se_e2_a_water32    240x3), O H, random weights: the speed benchmark's model, float64/float32
//   painn_water64      PaiNN with default hyperparameters (64 features, 2 layers, 16 radial
//                      functions), rc 5, O H, random weights, float64: the message-passing benchmark
//   painn_water64_l3   the same with 3 layers (halo against ghost exchange)
//   painn_water32_l3   issue 54's PaiNN: 32 features, 3 layers, rc 5, O H, float32, random
//                      weights, energies scaled by 1e-3 (so that MD keeps its atoms apart)
//   ARCH@CUTOFF[:HYPERPARAMETERS][/f32]  any architecture, O H, random weights, float64 (or 32)
#pragma once

#include <random>
#include <string>

#include "mlip/error.h"
#include "mlip/potentials.h"
#include "morse_model.h"

namespace mlip::testing {

// Per-species scale and shift drawn from a seeded generator: non-zero, different per species.
inline void set_random_energy_buffers(torch::jit::Module& module, unsigned seed, double scale_lo, double scale_hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> scale(scale_lo, scale_hi), shift(-6.0, -1.0);
  torch::NoGradGuard no_grad;  // only while setting buffers; never around evaluation
  torch::Tensor s = module.attr("energy_scale").toTensor(), b = module.attr("energy_shift").toTensor();
  for (int64_t k = 0; k < s.size(0); ++k) {
    s[k] = scale(rng);
    b[k] = shift(rng);
  }
}

inline BuiltModel build_test_model(const std::string& architecture, double cutoff, const nlohmann::json& hyper,
                                   torch::Dtype dtype, uint64_t seed,
                                   const std::vector<std::string>& species = {"H", "O"}) {
  ModelSpec spec;
  spec.architecture = architecture;
  spec.species = species;
  spec.cutoff = cutoff;
  spec.dtype = dtype == torch::kFloat32 ? "float32" : "float64";
  spec.seed = seed;
  spec.hyperparameters = hyper;
  return build_model(spec);
}

/// Writes the model called `name` (see above) to `path`. Throws mlip::Error on an unknown name.
inline void write_test_model(const std::string& name, const std::string& path) {
  if (name == "morse64" || name == "morse32") {
    Model m = make_morse_model({"H", "O"}, 3.5, name == "morse32" ? torch::kFloat32 : torch::kFloat64);
    save_model(m.module(), m.metadata(), path);
  } else if (name == "morse_md") {
    // A stiffer, longer Morse (alpha r0 = 4.2, like Morse fits of fcc metals) whose fcc crystal
    // is mechanically stable near water's number density (0.1 / A^3): the default alpha r0 = 2.1
    // makes a dense system collapse, because attraction grows with every neighbour added.
    Model m = make_morse_model({"H", "O"}, 5.0);
    m.module().setattr("alpha", 1.6);
    m.module().setattr("r0", 2.6);
    save_model(m.module(), m.metadata(), path);
  } else if (name == "se_e2_a" || name == "se_e2_a_md" || name == "se_e2_a_md_compressed" ||
             name == "se_e2_a_md_scaled") {
    const bool md = name != "se_e2_a";
    BuiltModel b = build_test_model("se_e2_a", md ? 4.0 : 3.5,
                                    {{"embedding", {4, 8}}, {"axis_neurons", 4}, {"fitting", {8, 8}},
                                     {"rcut_smth", md ? 2.0 : 1.5}, {"neighbor_norm", 10.0}},
                                    torch::kFloat64, 11);
    if (md) {
      set_random_energy_buffers(b.module, 12, 0.03, 0.05);
    } else {
      set_random_energy_buffers(b.module, 12, 0.5, 1.5);
    }
    {
      torch::NoGradGuard no_grad;
      b.module.attr("env_std").toTensor().copy_(torch::tensor({{0.3, 0.2}, {0.25, 0.15}}));
      if (name == "se_e2_a_md_scaled") b.module.attr("energy_scale").toTensor().mul_(1.001);
    }
    if (name == "se_e2_a_md_compressed") {
      CompressOptions options;
      options.min_distance = 1.0;   // the NVE test's atoms stay beyond 1.5 A
      b.module = compress_model(b.module, b.metadata, options);
    }
    export_frozen(b.module, b.metadata, path);
  } else if (name == "painn" || name == "painn3") {
    BuiltModel b = build_test_model("painn", 3.0,
                                    {{"features", 8}, {"layers", name == "painn" ? 2 : 3}, {"radial_basis", 4}},
                                    torch::kFloat64, 13);
    set_random_energy_buffers(b.module, 14, 0.5, 1.5);
    export_frozen(b.module, b.metadata, path);
  } else if (name == "mace" || name == "mace3" || name == "mace32" || name == "mace_heads") {
    nlohmann::json hp = {{"num_channels", 4}, {"max_L", 1}, {"max_ell", 2}, {"correlation", 3},
                         {"num_interactions", name == "mace3" ? 3 : 2}, {"radial_MLP", {8}},
                         {"MLP_irreps", "4x0e"}, {"avg_num_neighbors", 4.0}};
    if (name == "mace_heads") hp.update({{"heads", {"a", "b", "c"}}, {"head", "b"}});
    BuiltModel b = build_test_model("mace", 3.0, hp, name == "mace32" ? torch::kFloat32 : torch::kFloat64, 17);
    set_random_energy_buffers(b.module, 18, 0.5, 1.5);
    export_frozen(b.module, b.metadata, path);
  } else if (name == "se_e2_a_ta") {
    // One-species metal model (tantalum), cutoff 4.5 A: 1st-3rd bcc shells at a = 3.3 A.
    BuiltModel b = build_test_model("se_e2_a", 4.5,
                                    {{"embedding", {4, 8}}, {"axis_neurons", 4}, {"fitting", {8, 8}},
                                     {"rcut_smth", 2.0}, {"neighbor_norm", 14.0}},
                                    torch::kFloat64, 15, {"Ta"});
    set_random_energy_buffers(b.module, 16, 0.5, 1.5);
    {
      torch::NoGradGuard no_grad;
      b.module.attr("env_std").toTensor().copy_(torch::tensor({{0.2, 0.15}}));
    }
    export_frozen(b.module, b.metadata, path);
  } else if (name == "se_e2_a_water64" || name == "se_e2_a_water32") {
    BuiltModel b = build_test_model("se_e2_a", 6.0, nlohmann::json::object(),
                                    name == "se_e2_a_water32" ? torch::kFloat32 : torch::kFloat64, 1, {"O", "H"});
    export_frozen(b.module, b.metadata, path);
  } else if (name == "painn_water64" || name == "painn_water64_l3") {
    const nlohmann::json hp = name == "painn_water64" ? nlohmann::json::object() : nlohmann::json{{"layers", 3}};
    BuiltModel b = build_test_model("painn", 5.0, hp, torch::kFloat64, 2, {"O", "H"});
    export_frozen(b.module, b.metadata, path);
  } else if (name == "painn_water32_l3") {
    // Its energies scaled by 1e-3 (the cost does not depend on the weights): MD of its random
    // weights on water lost atoms within 8 steps of 0.5 fs unscaled, 25 scaled (atoms that meet:
    // nothing repels them); bench_pair.sh runs it with steps of 0.1 fs.
    BuiltModel b = build_test_model("painn", 5.0, {{"features", 32}, {"layers", 3}}, torch::kFloat32, 2, {"O", "H"});
    {
      torch::NoGradGuard no_grad;
      b.module.attr("energy_scale").toTensor().mul_(1e-3);
    }
    export_frozen(b.module, b.metadata, path);
  } else if (name.find('@') != std::string::npos) {
    // ARCH@CUTOFF[:JSON-hyperparameters][/f32], O H, random weights (benchmarks' variants), e.g.
    // 'painn@5:{"features":32,"layers":3}' or 'se_e2_a@5/f32'.
    std::string spec = name;
    const bool f32 = spec.size() > 4 && spec.compare(spec.size() - 4, 4, "/f32") == 0;
    if (f32) spec.resize(spec.size() - 4);
    const auto at = spec.find('@'), colon = spec.find(':');
    const nlohmann::json hp = colon == std::string::npos ? nlohmann::json::object() : nlohmann::json::parse(spec.substr(colon + 1));
    BuiltModel b = build_test_model(spec.substr(0, at), std::stod(spec.substr(at + 1, colon - at - 1)), hp,
                                    f32 ? torch::kFloat32 : torch::kFloat64, 2, {"O", "H"});
    export_frozen(b.module, b.metadata, path);
  } else {
    throw Error("unknown test model '" + name + "' (known: ARCH@CUTOFF[:HYPERPARAMETERS][/f32], morse64, morse32, morse_md, se_e2_a, se_e2_a_md, se_e2_a_md_compressed, "
                "se_e2_a_ta, painn, painn3, "
                "se_e2_a_water64, se_e2_a_water32, painn_water64, painn_water64_l3, painn_water32_l3)");
  }
}

}  // namespace mlip::testing
