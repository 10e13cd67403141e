// The parts of mace-torch's MACE that vary between its public model families, beside the shape:
// the radial basis (Bessel frequencies, Agnesi distance transform, where the cutoff envelope is
// applied), the ZBL pair repulsion and the readout's gate. Each is mace-torch's closed form, so that
// an imported model computes mace-torch's function (python/mace_to_mlip.py) and a model trained
// here with the same hyperparameters means the same thing. The Bessel basis (with its envelope
// where it applies) is one operator, mlip::bessel_radial (derivatives to order 6); the rest is
// TorchScript that LibTorch's autograd differentiates to any order. The envelope polynomial is also
// written here as script (envelope()) for ZBL and the deferred envelope.
#pragma once

#include <string>
#include <vector>

#include "builder.h"

namespace mlip::detail {

struct MaceRadial {
  std::vector<double> bessel;  // frequencies (1/Å), default n pi / r_max, n = 1..num_radial_basis
  bool agnesi = false;         // distance_transform "Agnesi"
  double agnesi_q = 0.9183, agnesi_p = 4.5791, agnesi_a = 1.0805;
  bool apply_cutoff = true;  // the envelope multiplies the basis (true) or the radial MLP's output
  bool zbl = false;          // pair_repulsion
  double zbl_a_exp = 0.3, zbl_a_prefactor = 0.4543;
  int nb = 8;                // num_radial_basis
  int p = 5;                 // num_cutoff_basis: the envelope's and ZBL's polynomial order
  std::string gate = "silu";  // the last readout's nonlinearity: silu, tanh, abs or None

  /// The radial terms mp_edges returns are the basis x envelope (E, nb) unless the basis needs the
  /// species (Agnesi) or the envelope comes later: then (r, envelope) (E, 2).
  bool deferred() const { return agnesi || !apply_cutoff; }
  /// The Bessel frequencies: `bessel`, or n pi / cutoff.
  std::vector<double> frequencies(double cutoff) const;
  /// Whether frequency n is (n + 1) times the first (the default's; bessel_radial's recurrence).
  bool harmonic() const;
};

/// Reads gate, bessel_weights, distance_transform (+ agnesi), apply_cutoff and pair_repulsion (+ zbl).
MaceRadial read_mace_radial(HyperParameters& hp, int num_radial_basis, int num_cutoff_basis);

/// Registers the radial basis's tables (bessel_w, agnesi_r0) once per model.
void mace_radial_buffers(ModuleBuilder& b, const MaceRadial& m, const std::vector<std::string>& species,
                         double cutoff);

/// mp_edges' lines from `r` (E, 1) to `radial` (see MaceRadial::deferred).
std::string mace_edges_source(const MaceRadial& m, double cutoff);

/// The layer's lines from `radial`, `attrs`, `center`, `neighbor` to `w_in` (the radial MLP's
/// input) and, deferred, `env` (without apply_cutoff: the MLP output's factor).
std::string mace_layer_radial_source(const MaceRadial& m, double cutoff);

/// The readout's gate applied to the expression `x`, with e3nn's normalisation.
std::string mace_gate(const MaceRadial& m, const std::string& x);

/// Registers ZBL's tables and returns mp_readout's lines for `e_zbl` (n_centers,); "" without it.
std::string mace_zbl_source(ModuleBuilder& b, const MaceRadial& m, const std::vector<std::string>& species);

}  // namespace mlip::detail
