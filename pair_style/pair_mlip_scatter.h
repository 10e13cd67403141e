/* -*- c++ -*- ----------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.

   The output side of pair_style mlip, shared by mlip (plain loops over C arrays) and mlip/kk
   (Kokkos kernels over views): what one centre adds to the energies and what one edge adds to
   forces and virials. Each caller supplies a Sink that says how to add (plain or atomic, into
   arrays or views); the physics is written once, here.
------------------------------------------------------------------------- */

#ifndef LMP_PAIR_MLIP_SCATTER_H
#define LMP_PAIR_MLIP_SCATTER_H

#if defined(KOKKOS_INLINE_FUNCTION)
#define MLIP_SCATTER_INLINE KOKKOS_INLINE_FUNCTION
#else
#define MLIP_SCATTER_INLINE inline
#endif

namespace LAMMPS_NS {
namespace mlip_scatter {

// What LAMMPS asked for in this compute() call (Pair::ev_init's flags).
struct Requests {
  bool energy_global, energy_atom, virial_global, virial_atom, centroid_atom;
  MLIP_SCATTER_INLINE bool any_virial() const { return virial_global || virial_atom || centroid_atom; }
};

// A centre atom's energy E_i: to the total and to the atom.
// Sink: add_energy(e), add_energy_atom(i, e).
template <class Sink>
MLIP_SCATTER_INLINE void centre(const Sink &sink, const Requests &req, int i, double energy)
{
  if (req.energy_global) sink.add_energy(energy);
  if (req.energy_atom) sink.add_energy_atom(i, energy);
}

// An edge i -> j with r_ij = x_j - x_i and g = dE/dr_ij (eV/Angstrom):
//   F_i += g, F_j -= g (so j may be a ghost: LAMMPS reverse-communicates its force);
//   W = -r (x) g, the edge's share of sum_i x_i . f_i, to the global virial and, as a per-atom
//   virial, to the neighbour j. The full 9-component form goes to the centroid virial, which is
//   what makes the Green-Kubo heat flux correct for many-body models (Fan et al., PRB 92, 094301).
// Sink: add_force(atom, fx, fy, fz), add_virial(v[6]), add_virial_atom(atom, v[6]),
//       add_centroid_atom(atom, cv[9]).
template <class Sink>
MLIP_SCATTER_INLINE void edge(const Sink &sink, const Requests &req, int i, int j, const double *r, const double *g)
{
  sink.add_force(i, g[0], g[1], g[2]);
  sink.add_force(j, -g[0], -g[1], -g[2]);
  if (!req.any_virial()) return;
  const double v[6] = {-r[0] * g[0], -r[1] * g[1], -r[2] * g[2], -r[0] * g[1], -r[0] * g[2], -r[1] * g[2]};
  if (req.virial_global) sink.add_virial(v);
  if (req.virial_atom) sink.add_virial_atom(j, v);
  if (req.centroid_atom) {
    const double cv[9] = {v[0], v[1], v[2], v[3], v[4], v[5], -r[1] * g[0], -r[2] * g[0], -r[2] * g[1]};
    sink.add_centroid_atom(j, cv);
  }
}

}    // namespace mlip_scatter
}    // namespace LAMMPS_NS

#endif
