// Model deviation of a committee (models trained alike, e.g. with different seeds), as DeePMD-kit
// defines it for active learning: where the models disagree, the data do not yet pin the
// potential down. For K models with forces F_k,i on atom i, total virials W_k and energies E_k
// of a system of N atoms:
//   force deviation of atom i   eps_i = sqrt( mean_k |F_k,i - mean_k F_k,i|^2 )
//                               (relative: eps_i / (|mean_k F_k,i| + level))
//   virial deviation            std_k(W_k,ab) / N for each of the 9 components ab
//   energy deviation            std_k(E_k) / N
// (std over models: the population standard deviation, sqrt(mean of squared deviations)).
// Plain arithmetic on doubles: pair_style mlip (over MPI ranks) and `mlip-trainer deviation`
// (per frame) both use these.
#pragma once

#include <cstdint>
#include <limits>

namespace mlip {

/// Per-atom force deviation: forces of model k, atom i, component d at
/// forces[k * model_stride + 3 * i + d]; relative > 0: divided by (|mean force| + relative).
void atom_force_deviation(const double* forces, int n_models, int64_t n_atoms, int64_t model_stride,
                          double relative, double* out);

/// Max, min and mean of values (count of them); combine() merges summaries of parts
/// (MPI ranks): mean = sum / count.
struct DeviationSummary {
  double max = -std::numeric_limits<double>::infinity();
  double min = std::numeric_limits<double>::infinity();
  double sum = 0.0;
  int64_t count = 0;
  void add(double v);
  double mean() const { return count > 0 ? sum / static_cast<double>(count) : 0.0; }
};

/// Virial deviation: virials of model k at virials[9 * k + ab] (row-major 3x3), over n_atoms;
/// the summary is over the 9 components.
DeviationSummary virial_deviation(const double* virials, int n_models, double n_atoms);

/// Energy deviation per atom: std over models of energies[k], divided by n_atoms.
double energy_deviation(const double* energies, int n_models, double n_atoms);

}  // namespace mlip
