/* -*- c++ -*- ----------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.
   pair_style mlip/kk MODEL [MODEL2 ...] [keywords]   (KOKKOS package: -k on -sf kk; the keywords
   of pair_style mlip but device: pair_mlip_keywords.cpp)
------------------------------------------------------------------------- */

#ifdef PAIR_CLASS
// clang-format off
PairStyle(mlip/kk,PairMLIPKokkos<LMPDeviceType>);
PairStyle(mlip/kk/device,PairMLIPKokkos<LMPDeviceType>);
PairStyle(mlip/kk/host,PairMLIPKokkos<LMPHostType>);
// clang-format on
#else

#ifndef LMP_PAIR_MLIP_KOKKOS_H
#define LMP_PAIR_MLIP_KOKKOS_H

#include "kokkos_type.h"
#include "pair_kokkos.h"
#include "pair_mlip.h"

#include <cstdint>

namespace LAMMPS_NS {

// pair_style mlip with atoms, neighbour lists and forces in Kokkos views. It differs from mlip
// only in where the graph comes from: it is built by Kokkos kernels from the views, handed to
// LibTorch as tensors that wrap the views' memory, and the model's outputs come back the same
// way. Settings, type mapping, checks and units are mlip's, and so are forces and virials: both
// take them from mlip::edge_forces (common/), here on the views' device.
template <class DeviceType> class PairMLIPKokkos : public PairMLIP {
 public:
  typedef DeviceType device_type;
  typedef ArrayTypes<DeviceType> AT;

  PairMLIPKokkos(class LAMMPS *);
  ~PairMLIPKokkos() override;
  void compute(int, int) override;
  void coeff(int, char **) override;
  void init_style() override;

  // Public only because they hold device lambdas (CUDA's rule for extended lambdas).
  // Committee member m (0: the model that drives the dynamics) on all local atoms.
  void evaluate_member(int m);
  // One model call: graph of the sources, then model, then outputs.
  void evaluate_sources(int member, int first, int count, bool whole_halo);
  // mlip's check_distances on the graph's views.
  void check_distances_on_device(int n_edges);
  // One graph's energies (n_centers) and forces and virials (n_nodes) to the nodes' atoms.
  void add_outputs_on_device(const double *energy, const mlip::EdgeForces &forces, int n_centers, int n_nodes);
  // The same to a committee member's sums for the model deviation (host).
  void add_member_outputs(int member, const mlip::ModelOutput &out, const mlip::EdgeForces &forces, int n_centers,
                          int n_nodes);

 protected:
  std::string model_device(const std::string &asked, std::string &note) override;

  typename AT::t_x_array_randomread x;
  typename AT::t_f_array f;
  typename AT::t_int_1d_randomread type;
  typename AT::t_neighbors_2d d_neighbors;
  typename AT::t_int_1d_randomread d_ilist;
  typename AT::t_int_1d_randomread d_numneigh;

  DAT::tdual_efloat_1d k_eatom;
  DAT::tdual_virial_array k_vatom;
  typedef Kokkos::DualView<F_FLOAT *[9], Kokkos::LayoutRight, LMPDeviceType> tdual_centroid_array;
  tdual_centroid_array k_cvatom;

  // The graph, in views that persist between calls (grown, never shrunk). Nodes [0, n_centers)
  // are the centres of the call; atom_node/node_atom map LAMMPS atoms to graph nodes and back.
  Kokkos::View<int *, DeviceType> d_type_species;    // (ntypes + 1) model species, -1 = NULL
  Kokkos::View<int *, DeviceType> d_atom_species;    // (nall) species of every atom, this step
  Kokkos::View<int *, DeviceType> d_atom_node;       // (nall) node of an atom, -1 = none
  Kokkos::View<int *, DeviceType> d_reached;         // (nall) 1 = neighbour not yet numbered
  Kokkos::View<int *, DeviceType> d_node_atom;       // (nodes) atom of a node
  Kokkos::View<int64_t *, DeviceType> d_node_species;
  Kokkos::View<int *, DeviceType> d_edge_offset;     // (sources + 1) first edge of each source
  Kokkos::View<int64_t **, Kokkos::LayoutRight, DeviceType> d_edge_index;    // (2, capacity)
  Kokkos::View<double **, Kokkos::LayoutRight, DeviceType> d_edge_vectors;   // (capacity, 3)
};

}    // namespace LAMMPS_NS

#endif
#endif
