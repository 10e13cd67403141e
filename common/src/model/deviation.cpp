#include "mlip/model/deviation.h"

#include <algorithm>
#include <cmath>

namespace mlip {

void atom_force_deviation(const double* forces, int n_models, int64_t n_atoms, int64_t model_stride,
                          double relative, double* out) {
  const double k_inv = 1.0 / n_models;
  for (int64_t i = 0; i < n_atoms; ++i) {
    double mean[3] = {0.0, 0.0, 0.0};
    for (int k = 0; k < n_models; ++k)
      for (int d = 0; d < 3; ++d) mean[d] += forces[k * model_stride + 3 * i + d];
    for (double& m : mean) m *= k_inv;
    double squares = 0.0;
    for (int k = 0; k < n_models; ++k)
      for (int d = 0; d < 3; ++d) {
        const double diff = forces[k * model_stride + 3 * i + d] - mean[d];
        squares += diff * diff;
      }
    out[i] = std::sqrt(squares * k_inv);
    if (relative > 0.0)
      out[i] /= std::sqrt(mean[0] * mean[0] + mean[1] * mean[1] + mean[2] * mean[2]) + relative;
  }
}

void DeviationSummary::add(double v) {
  max = std::max(max, v);
  min = std::min(min, v);
  sum += v;
  ++count;
}

namespace {

// Population standard deviation of values[k * stride], k < n.
double standard_deviation(const double* values, int n, int stride) {
  double mean = 0.0;
  for (int k = 0; k < n; ++k) mean += values[k * stride];
  mean /= n;
  double squares = 0.0;
  for (int k = 0; k < n; ++k) squares += (values[k * stride] - mean) * (values[k * stride] - mean);
  return std::sqrt(squares / n);
}

}  // namespace

DeviationSummary virial_deviation(const double* virials, int n_models, double n_atoms) {
  DeviationSummary s;
  for (int ab = 0; ab < 9; ++ab) s.add(standard_deviation(virials + ab, n_models, 9) / n_atoms);
  return s;
}

double energy_deviation(const double* energies, int n_models, double n_atoms) {
  return standard_deviation(energies, n_models, 1) / n_atoms;
}

}  // namespace mlip
