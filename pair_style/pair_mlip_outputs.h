/* -*- c++ -*- ----------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.

   What pair_style mlip and mlip/kk share on the output side. Forces and virials themselves come
   from mlip::edge_forces (common/, the function training and `mlip-trainer test` use too) as
   per-node forces and row-major 3x3 virials; the pair styles only add them to LAMMPS's atoms.
------------------------------------------------------------------------- */

#ifndef LMP_PAIR_MLIP_OUTPUTS_H
#define LMP_PAIR_MLIP_OUTPUTS_H

#if defined(KOKKOS_INLINE_FUNCTION)
#define MLIP_OUTPUTS_INLINE KOKKOS_INLINE_FUNCTION
#else
#define MLIP_OUTPUTS_INLINE inline
#endif

namespace LAMMPS_NS {
namespace mlip_outputs {

// LAMMPS orders a virial xx, yy, zz, xy, xz, yz (Pair::virial, vatom: k < 6) and a centroid
// virial the same, then yx, zx, zy (cvatom: k < 9). Component k is element
// row_major_index(k) of a row-major 3x3 W_ab = -sum r_a g_b.
MLIP_OUTPUTS_INLINE constexpr int row_major_index(int k)
{
  constexpr int index[9] = {0, 4, 8, 1, 2, 5, 3, 6, 7};
  return index[k];
}

}    // namespace mlip_outputs
}    // namespace LAMMPS_NS

#endif
