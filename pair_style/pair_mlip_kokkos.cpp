/* ----------------------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.

   pair_style mlip/kk: pair_style mlip on Kokkos views (see pair_mlip_kokkos.h).

   Per model call: kernels count each source atom's edges inside the cutoff, number the
   neighbours they reach, and fill the edge list and edge vectors into views; the views are
   wrapped as tensors (mlip::evaluate_graph, no copy for float64 models on the views' device);
   forces and virials come from the edge gradients by mlip::edge_forces, the function every
   consumer uses (LibTorch on the views' device), and kernels add them to the nodes' atoms.

   Local models: sources are chunks of local atoms (nodes: the chunk's centres, then the
   neighbours they reach), as in mlip. Message-passing models (L > 1): every owned and ghost atom
   is a node and a source, and the local atoms [0, nlocal) are the centres. That graph is exact:
   ghosts within L-1 hops of a local atom are within (L-1)*cutoff and have complete neighbour
   lists in the L*cutoff ghost shell, and edges further out cannot reach a local atom in L
   messages (their gradients are exactly zero). It costs more than mlip's hop-by-hop halo,
   which would need a breadth-first search on the device.
------------------------------------------------------------------------- */

#include "pair_mlip_kokkos.h"

#include "atom_kokkos.h"
#include "atom_masks.h"
#include "comm.h"
#include "error.h"
#include "force.h"
#include "kokkos.h"
#include "memory_kokkos.h"
#include "neigh_list_kokkos.h"
#include "neigh_request.h"
#include "neighbor.h"

#include "pair_mlip_outputs.h"

#include "mlip/model/device.h"
#include "mlip/error.h"
#include "mlip/model/model.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <type_traits>

#ifdef KOKKOS_ENABLE_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

using namespace LAMMPS_NS;

namespace {

using Clock = std::chrono::steady_clock;

// Where the views of DeviceType live, as a LibTorch device: the host, or the GPU Kokkos runs on
// (-k on g N gives each rank one). The CUDA branch compiles (scripts/check-kokkos-cuda.sh) but
// has not run yet: no whole Kokkos with CUDA could be built here (docs/gpu.md).
template <class DeviceType> torch::Device tensor_device()
{
  if (std::is_same<typename DeviceType::memory_space, Kokkos::HostSpace>::value) return torch::kCPU;
  int index = 0;
#ifdef KOKKOS_ENABLE_CUDA
  index = Kokkos::Cuda().cuda_device();
#endif
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

template <class View> void grow(View &view, int n, const char *name)
{
  if (static_cast<int>(view.extent(0)) < n) view = View(Kokkos::ViewAllocateWithoutInitializing(name), n + n / 4 + 16);
}

// Whether the edge a -> j is inside the cutoff (cut2: its square), with its vector d in A. The
// count and the list kernels both ask this, and on a GPU its products and sums are rounded as
// written (nvcc would otherwise fuse them as it sees fit in each kernel), so that the two agree on
// a pair at the cutoff: a count that differs from the list would overrun the next source's edges.
template <class X>
KOKKOS_INLINE_FUNCTION bool edge_within(const X &x, int a, int j, double to_A, double cut2, double d[3])
{
  for (int k = 0; k < 3; k++) d[k] = (x(j, k) - x(a, k)) * to_A;
#ifdef __CUDA_ARCH__
  const double r2 = __dadd_rn(__dadd_rn(__dmul_rn(d[0], d[0]), __dmul_rn(d[1], d[1])), __dmul_rn(d[2], d[2]));
#else
  const double r2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2];
#endif
  return r2 < cut2;
}

}    // namespace

/* ---------------------------------------------------------------------- */

template <class DeviceType> PairMLIPKokkos<DeviceType>::PairMLIPKokkos(LAMMPS *lmp) : PairMLIP(lmp)
{
  kokkosable = 1;
  atomKK = (AtomKokkos *) atom;
  execution_space = ExecutionSpaceFromDevice<DeviceType>::space;
  datamask_read = X_MASK | F_MASK | TYPE_MASK | ENERGY_MASK | VIRIAL_MASK;
  datamask_modify = F_MASK | ENERGY_MASK | VIRIAL_MASK;
}

template <class DeviceType> PairMLIPKokkos<DeviceType>::~PairMLIPKokkos()
{
  if (copymode) return;
  // The per-atom arrays belong to the dual views: keep Pair's destructor off them.
  memoryKK->destroy_kokkos(k_eatom, eatom);
  memoryKK->destroy_kokkos(k_vatom, vatom);
  memoryKK->destroy_kokkos(k_cvatom, cvatom);
}

// The model runs where the Kokkos views live: on the host, or on Kokkos's GPU.
template <class DeviceType>
std::string PairMLIPKokkos<DeviceType>::model_device(const std::string &asked, std::string &note)
{
  if (!asked.empty())
    error->all(FLERR, fmt::format("pair_style mlip/kk: no 'device' keyword ('{}'): the model runs where Kokkos runs "
                                  "(-k on g N / -sf kk); use pair_style mlip for 'device'", asked));
  const torch::Device d = tensor_device<DeviceType>();
  note = d.is_cpu() ? "the host (Kokkos host views)" : "Kokkos's GPU " + d.str();
  if (!d.is_cpu()) {
    // LibTorch's CUDA backend, loaded before the model (mlip/model/device.h).
    const std::string why = mlip::load_cuda_backend();
    if (!why.empty()) error->all(FLERR, "pair_style mlip/kk: the model cannot run on Kokkos's GPU: " + why);
  }
  return d.str();
}

/* ----------------------------------------------------------------------
   coeff: mlip's type map, copied to the device
------------------------------------------------------------------------- */

template <class DeviceType> void PairMLIPKokkos<DeviceType>::coeff(int narg, char **arg)
{
  PairMLIP::coeff(narg, arg);
  d_type_species = Kokkos::View<int *, DeviceType>("mlip/kk:type_species", type_species.size());
  auto h = Kokkos::create_mirror_view(d_type_species);
  for (std::size_t t = 0; t < type_species.size(); t++) h(t) = type_species[t];
  Kokkos::deep_copy(d_type_species, h);
}

/* ----------------------------------------------------------------------
   init_style: mlip's checks and request, made a Kokkos full list on this device
------------------------------------------------------------------------- */

template <class DeviceType> void PairMLIPKokkos<DeviceType>::init_style()
{
  PairMLIP::init_style();
  const bool host = std::is_same<DeviceType, LMPHostType>::value && !std::is_same<DeviceType, LMPDeviceType>::value;
  const bool device = std::is_same<DeviceType, LMPDeviceType>::value;
#if MLIP_LAMMPS_NEW_NEIGHBOR_API
  auto request = neighbor->find_request(this);
  request->set_kokkos_host(host);
  request->set_kokkos_device(device);
#else
  // PairMLIP::init_style made the last request: full, with ghost lists for message passing.
  NeighRequest *request = neighbor->requests[neighbor->nrequest - 1];
  request->kokkos_host = host ? 1 : 0;
  request->kokkos_device = device ? 1 : 0;
#endif
}

/* ----------------------------------------------------------------------
   compute: per-atom output views, then one model call per chunk (or one for the whole halo)
------------------------------------------------------------------------- */

template <class DeviceType> void PairMLIPKokkos<DeviceType>::compute(int eflag_in, int vflag_in)
{
  begin_compute(eflag_in, vflag_in, /*alloc=*/false);

  // Per-atom outputs live in dual views (zeroed at creation), mirrored to eatom/vatom/cvatom.
  if (eflag_atom) {
    memoryKK->destroy_kokkos(k_eatom, eatom);
    memoryKK->create_kokkos(k_eatom, eatom, maxeatom, "pair:eatom");
  }
  if (vflag_atom) {
    memoryKK->destroy_kokkos(k_vatom, vatom);
    memoryKK->create_kokkos(k_vatom, vatom, maxvatom, "pair:vatom");
  }
  if (cvflag_atom) {
    memoryKK->destroy_kokkos(k_cvatom, cvatom);
    memoryKK->create_kokkos(k_cvatom, cvatom, maxcvatom, "pair:cvatom");
  }

  atomKK->sync(execution_space, X_MASK | F_MASK | TYPE_MASK);
  atomKK->modified(execution_space, F_MASK);
  x = atomKK->k_x.template view<DeviceType>();
  f = atomKK->k_f.template view<DeviceType>();
  type = atomKK->k_type.template view<DeviceType>();
  auto *k_list = static_cast<NeighListKokkos<DeviceType> *>(list);
  d_neighbors = k_list->d_neighbors;
  d_ilist = k_list->d_ilist;
  d_numneigh = k_list->d_numneigh;

  // Species of every atom this step; node maps sized for this step's atoms.
  const int nall = atom->nlocal + atom->nghost;
  if (static_cast<int>(d_atom_node.extent(0)) < nall) {
    d_atom_node = Kokkos::View<int *, DeviceType>("mlip/kk:atom_node", nall + nall / 4 + 16);
    d_reached = Kokkos::View<int *, DeviceType>("mlip/kk:reached", d_atom_node.extent(0));
    Kokkos::deep_copy(d_atom_node, -1);
  }
  grow(d_atom_species, nall, "mlip/kk:atom_species");
  grow(d_node_atom, nall + options.chunk, "mlip/kk:node_atom");
  grow(d_node_species, nall + options.chunk, "mlip/kk:node_species");
  // The model that drives the dynamics; on a step that reports the deviation, the committee.
  begin_deviation();
  const bool reporting = deviation_step();
  for (int m = 0; m < (reporting ? committee_size() : 1); m++) evaluate_member(m);
  if (reporting) {
    atomKK->sync(Host, TYPE_MASK | DVECTOR_MASK);
    end_deviation();    // on the host: reverse communication, reductions, d_mlip_devi_f, the file
    atomKK->modified(Host, DVECTOR_MASK);
  }

  if (eflag_atom) {
    k_eatom.template modify<DeviceType>();
    k_eatom.template sync<LMPHostType>();
  }
  if (vflag_atom) {
    k_vatom.template modify<DeviceType>();
    k_vatom.template sync<LMPHostType>();
  }
  if (cvflag_atom) {
    k_cvatom.template modify<DeviceType>();
    k_cvatom.template sync<LMPHostType>();
  }
  end_compute();
}

/* ----------------------------------------------------------------------
   evaluate_member: committee member m (0: the model that drives the dynamics) on every local
   atom, in chunks or, for a message-passing model, on the whole halo at once
------------------------------------------------------------------------- */

template <class DeviceType> void PairMLIPKokkos<DeviceType>::evaluate_member(int m)
{
  const Member info = member(m);
  auto type_species_v = d_type_species;
  if (m > 0) {    // this model's species of each type
    type_species_v = Kokkos::View<int *, DeviceType>("mlip/kk:member_species", info.type_species->size());
    auto h = Kokkos::create_mirror_view(type_species_v);
    for (std::size_t t = 0; t < info.type_species->size(); t++) h(t) = (*info.type_species)[t];
    Kokkos::deep_copy(type_species_v, h);
  }
  auto atom_species = d_atom_species;
  auto type_v = type;
  Kokkos::parallel_for(
      Kokkos::RangePolicy<DeviceType>(0, atom->nlocal + atom->nghost),
      KOKKOS_LAMBDA(int a) { atom_species(a) = type_species_v(type_v(a)); });

  if (m == 0 && exchanging()) {    // all local atoms in one graph, their ghosts one cutoff deep
    evaluate_sources(m, 0, list->inum, false);
  } else if (info.layers > 1) {
    evaluate_sources(m, 0, list->inum + list->gnum, true);
  } else {
    for (int first = 0; first < list->inum; first += options.chunk)
      evaluate_sources(m, first, std::min(options.chunk, list->inum - first), false);
  }
}

/* ----------------------------------------------------------------------
   evaluate_sources: graph of sources ilist[first, first + count) for committee member `member`,
   model call, outputs (to LAMMPS's atoms for member 0, to the deviation's sums on a step that
   reports it).
   whole_halo: node = atom for all owned and ghost atoms, centres = owned atoms.
------------------------------------------------------------------------- */

template <class DeviceType>
void PairMLIPKokkos<DeviceType>::evaluate_sources(int member, int first, int count, bool whole_halo)
{
  const bool exchange = member == 0 && exchanging();    // every rank takes part in every exchange
  if (count <= 0 && !exchange) return;
  auto t0 = Clock::now();
  const int nall = atom->nlocal + atom->nghost;
  const Member info = this->member(member);
  const double cut2 = info.cutoff * info.cutoff;      // in A, as the model: LAMMPS's distances times to_A
  const double to_A = 1.0 / distance_unit;
  typedef Kokkos::RangePolicy<DeviceType> Range;

  // Local copies: kernels capture views by value, not through `this`.
  auto xv = x;
  auto ilist = d_ilist;
  auto numneigh = d_numneigh;
  auto neighbors = d_neighbors;
  auto atom_species = d_atom_species;
  auto atom_node = d_atom_node;
  auto reached = d_reached;
  auto node_atom = d_node_atom;
  auto node_species = d_node_species;

  // 1. Nodes of the sources (the centres first, as the model contract wants).
  int n_centers = 0, n_nodes = 0;
  if (whole_halo) {
    n_centers = atom->nlocal;
    n_nodes = nall;
    Kokkos::parallel_for(
        Range(0, nall), KOKKOS_LAMBDA(int a) {
          atom_node(a) = a;
          node_atom(a) = a;
          node_species(a) = atom_species(a) < 0 ? 0 : atom_species(a);    // NULL: no edges, no energy
        });
  } else {
    n_centers = count;
    Kokkos::parallel_for(
        Range(0, count), KOKKOS_LAMBDA(int s) {
          const int a = ilist(first + s);
          atom_node(a) = s;
          node_atom(s) = a;
          node_species(s) = atom_species(a) < 0 ? 0 : atom_species(a);
        });
  }

  // 2. Edges per source inside the cutoff; neighbours without a node yet are marked.
  grow(d_edge_offset, count + 1, "mlip/kk:edge_offset");
  auto offset = d_edge_offset;
  Kokkos::parallel_for(
      Range(0, count), KOKKOS_LAMBDA(int s) {
        const int a = ilist(first + s);
        int n = 0;
        if (atom_species(a) >= 0) {
          for (int jj = 0; jj < numneigh(a); jj++) {
            const int j = neighbors(a, jj) & NEIGHMASK;
            double d[3];
            if (atom_species(j) < 0 || !edge_within(xv, a, j, to_A, cut2, d)) continue;
            n++;
            if (atom_node(j) < 0) reached(j) = 1;
          }
        }
        offset(s) = n;
      });

  // 3. Number the reached neighbours after the centres (in atom order).
  if (!whole_halo) {
    int n_new = 0;
    const int base = n_centers;
    Kokkos::parallel_scan(
        Range(0, nall),
        KOKKOS_LAMBDA(int a, int &update, const bool final) {
          if (reached(a)) {
            if (final) {
              const int k = base + update;
              atom_node(a) = k;
              node_atom(k) = a;
              node_species(k) = atom_species(a);
              reached(a) = 0;
            }
            update += 1;
          }
        },
        n_new);
    n_nodes = n_centers + n_new;
  }

  // 4. Edge offsets (exclusive scan of the counts), then the edges themselves. The sum in 64
  // bits: a call's edges (and their capacity, a quarter more) must fit the int offsets.
  int64_t edges_in_call = 0;
  Kokkos::parallel_scan(
      Range(0, count),
      KOKKOS_LAMBDA(int s, int64_t &update, const bool final) {
        const int n = offset(s);
        if (final) offset(s) = static_cast<int>(update);
        update += n;
      },
      edges_in_call);
  constexpr int64_t most_edges = (int64_t(1) << 31) / 5 * 4 - 64;
  if (edges_in_call > most_edges)
    error->one(FLERR, fmt::format("pair_style mlip/kk: a model call of {} atoms has {} edges, more than its edge list "
                                  "can index ({}): run on more ranks, or give a smaller 'chunk' where calls are chunked",
                                  count, edges_in_call, most_edges));
  const int n_edges = static_cast<int>(edges_in_call);
  if (static_cast<int>(d_edge_vectors.extent(0)) < n_edges) {
    const int capacity = n_edges + n_edges / 4 + 64;
    d_edge_index = decltype(d_edge_index)(Kokkos::ViewAllocateWithoutInitializing("mlip/kk:edge_index"), 2, capacity);
    d_edge_vectors =
        decltype(d_edge_vectors)(Kokkos::ViewAllocateWithoutInitializing("mlip/kk:edge_vectors"), capacity, 3);
  }
  auto edge_index = d_edge_index;
  auto edge_vectors = d_edge_vectors;
  Kokkos::parallel_for(
      Range(0, count), KOKKOS_LAMBDA(int s) {
        const int a = ilist(first + s);
        if (atom_species(a) < 0) return;
        int e = offset(s);
        const int64_t centre = atom_node(a);
        for (int jj = 0; jj < numneigh(a); jj++) {
          const int j = neighbors(a, jj) & NEIGHMASK;
          double d[3];
          if (atom_species(j) < 0 || !edge_within(xv, a, j, to_A, cut2, d)) continue;
          edge_index(0, e) = centre;
          edge_index(1, e) = atom_node(j);
          for (int k = 0; k < 3; k++) edge_vectors(e, k) = d[k];
          e++;
        }
      });
  check_distances_on_device(n_edges);
  if (options.timing) {
    Kokkos::fence();
    add_time(GRAPH, std::chrono::duration<double>(Clock::now() - t0).count());
    t0 = Clock::now();
  }

  // 5. The model, on tensors that wrap the views (memory owned by this pair style, alive until
  // the next call; the model only reads it).
  mlip::GraphView graph;
  graph.species = node_species.data();
  graph.n_nodes = n_nodes;
  graph.edge_index = edge_index.data();
  graph.edge_index_stride = static_cast<int64_t>(edge_index.stride(0));
  graph.edge_vectors = edge_vectors.data();
  graph.n_edges = n_edges;
  graph.n_centers = n_centers;
  graph.device = tensor_device<DeviceType>();
#ifdef KOKKOS_ENABLE_CUDA
  // LibTorch on Kokkos's stream: its kernels follow the graph kernels above and precede the
  // output kernels below with no fence between them.
  std::optional<c10::cuda::CUDAStreamGuard> on_kokkos_stream;
  if constexpr (std::is_same<typename DeviceType::execution_space, Kokkos::Cuda>::value) {
    if (graph.device.is_cuda())
      on_kokkos_stream.emplace(c10::cuda::getStreamFromExternal(Kokkos::Cuda().cuda_stream(), graph.device.index()));
  }
#endif
  mlip::ModelOutput out;
  if (exchange) {    // features are exchanged through host buffers indexed by atom
    auto h_node_atom = Kokkos::create_mirror_view_and_copy(
        Kokkos::HostSpace(), Kokkos::subview(node_atom, std::make_pair(0, n_nodes)));
    out = evaluate_exchanging(graph, h_node_atom.data());
  } else try {
    out = mlip::evaluate_graph(*info.model, graph);
  } catch (const mlip::Error &e) {
    error->one(FLERR, std::string("pair_style mlip/kk: model evaluation failed: ") + e.what());
  } catch (const c10::Error &e) {
    error->one(FLERR, std::string("pair_style mlip/kk: model evaluation failed: ") + e.what_without_backtrace());
  }
  if (options.timing) {
    Kokkos::fence();
    add_time(MODEL, std::chrono::duration<double>(Clock::now() - t0).count());
    t0 = Clock::now();
  }

  // 6. Outputs: forces and virials by the function every consumer uses, added to the nodes'
  // atoms (each atom is at most one node: no atomics).
  mlip::EdgeForceRequest request;
  request.virial = vflag_global != 0 || deviation_step();
  request.node_virial = member == 0 && (vflag_atom || cvflag_atom);
  mlip::EdgeForces ef;
  try {
    ef = mlip::edge_forces(graph, out.edge_grad, request);
  } catch (const c10::Error &e) {
    error->one(FLERR, std::string("pair_style mlip/kk: forces: ") + e.what_without_backtrace());
  }
  to_lammps_units(out, ef);
  if (member == 0) add_outputs_on_device(out.atom_energy.data_ptr<double>(), ef, n_centers, n_nodes);
  if (deviation_step()) add_member_outputs(member, out, ef, n_centers, n_nodes);

  // Ready for the next chunk or model: no atom has a node.
  Kokkos::parallel_for(Range(0, n_nodes), KOKKOS_LAMBDA(int k) { atom_node(node_atom(k)) = -1; });
  if (options.timing) {
    Kokkos::fence();
    add_time(FORCES, std::chrono::duration<double>(Clock::now() - t0).count());
  }
}

/* ----------------------------------------------------------------------
   add_member_outputs: one graph's energies (NULL-type centres' set to zero), forces and virial
   to committee member `member`'s sums for the deviation, on the host
------------------------------------------------------------------------- */

template <class DeviceType>
void PairMLIPKokkos<DeviceType>::add_member_outputs(int member, const mlip::ModelOutput &out,
                                                    const mlip::EdgeForces &ef, int n_centers, int n_nodes)
{
  auto node_atom = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d_node_atom);
  auto atom_species = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), d_atom_species);
  torch::Tensor e = out.atom_energy.to(torch::kCPU, torch::kFloat64, /*non_blocking=*/false, /*copy=*/true).contiguous();
  double *ep = e.data_ptr<double>();
  for (int c = 0; c < n_centers; c++)
    if (atom_species(node_atom(c)) < 0) ep[c] = 0.0;
  add_to_deviation(member, node_atom.data(), n_centers, n_nodes, ep, ef);
}

/* ----------------------------------------------------------------------
   check_distances_on_device: the closest pair of the graph's edges, an error if it is closer
   than mlip's min_distance (the same message as mlip's)
------------------------------------------------------------------------- */

template <class DeviceType> void PairMLIPKokkos<DeviceType>::check_distances_on_device(int n_edges)
{
  if (n_edges == 0) return;
  typedef Kokkos::MinLoc<double, int> Closest;    // the result lives on the host
  typename Closest::value_type closest;
  auto edge_vectors = d_edge_vectors;
  Kokkos::parallel_reduce(
      Kokkos::RangePolicy<DeviceType>(0, n_edges),
      KOKKOS_LAMBDA(int e, typename Closest::value_type &m) {
        const double r2 = edge_vectors(e, 0) * edge_vectors(e, 0) + edge_vectors(e, 1) * edge_vectors(e, 1) +
            edge_vectors(e, 2) * edge_vectors(e, 2);
        if (r2 < m.val) {
          m.val = r2;
          m.loc = e;
        }
      },
      Closest(closest));
  if (closest.val >= min_distance * min_distance) return;
  Kokkos::View<int[2], DeviceType> pair("mlip/kk:close_pair");
  auto edge_index = d_edge_index;
  auto node_atom = d_node_atom;
  const int e = closest.loc;
  Kokkos::parallel_for(
      Kokkos::RangePolicy<DeviceType>(0, 2), KOKKOS_LAMBDA(int k) { pair(k) = node_atom(edge_index(k, e)); });
  auto host = Kokkos::create_mirror_view(pair);
  Kokkos::deep_copy(host, pair);
  atomKK->sync(Host, TAG_MASK);
  close_atoms_error(host(0), host(1), std::sqrt(closest.val));
}

/* ----------------------------------------------------------------------
   add_outputs_on_device: energies (device pointer, n_centers), node forces and virials
   (mlip::edge_forces' tensors on the views' device) to the atoms of the nodes
------------------------------------------------------------------------- */

template <class DeviceType>
void PairMLIPKokkos<DeviceType>::add_outputs_on_device(const double *energy_ptr, const mlip::EdgeForces &ef,
                                                       int n_centers, int n_nodes)
{
  typedef Kokkos::RangePolicy<DeviceType> Range;
  typedef Kokkos::MemoryTraits<Kokkos::Unmanaged> Unmanaged;
  typedef Kokkos::View<const double **, Kokkos::LayoutRight, DeviceType, Unmanaged> NodeView;
  using mlip_outputs::row_major_index;
  auto node_atom = d_node_atom;
  auto atom_species = d_atom_species;
  auto fv = f;
  Kokkos::View<const double *, DeviceType, Unmanaged> energy(energy_ptr, n_centers);
  const NodeView force(ef.forces.data_ptr<double>(), n_nodes, 3);
  Kokkos::parallel_for(
      Range(0, n_nodes), KOKKOS_LAMBDA(int n) {
        const int a = node_atom(n);
        for (int k = 0; k < 3; k++) fv(a, k) += force(n, k);
      });
  if (eflag_global) {
    double total = 0.0;
    Kokkos::parallel_reduce(
        Range(0, n_centers),
        KOKKOS_LAMBDA(int c, double &sum) {
          if (atom_species(node_atom(c)) >= 0) sum += energy(c);    // a NULL-type atom gets none
        },
        total);
    eng_vdwl += total;
  }
  if (eflag_atom) {
    auto eatom_v = k_eatom.template view<DeviceType>();
    Kokkos::parallel_for(
        Range(0, n_centers), KOKKOS_LAMBDA(int c) {
          const int a = node_atom(c);
          if (atom_species(a) >= 0) eatom_v(a) += energy(c);
        });
  }
  if (vflag_global) {
    const torch::Tensor w = ef.virial.cpu();
    for (int k = 0; k < 6; k++) virial[k] += w.data_ptr<double>()[row_major_index(k)];
  }
  if (!vflag_atom && !cvflag_atom) return;
  const NodeView w(ef.node_virial.data_ptr<double>(), n_nodes, 9);
  if (vflag_atom) {
    auto vatom_v = k_vatom.template view<DeviceType>();
    Kokkos::parallel_for(
        Range(0, n_nodes), KOKKOS_LAMBDA(int n) {
          for (int k = 0; k < 6; k++) vatom_v(node_atom(n), k) += w(n, row_major_index(k));
        });
  }
  if (cvflag_atom) {
    auto cvatom_v = k_cvatom.template view<DeviceType>();
    Kokkos::parallel_for(
        Range(0, n_nodes), KOKKOS_LAMBDA(int n) {
          for (int k = 0; k < 9; k++) cvatom_v(node_atom(n), k) += w(n, row_major_index(k));
        });
  }
}

namespace LAMMPS_NS {
template class PairMLIPKokkos<LMPDeviceType>;
#ifdef LMP_KOKKOS_GPU
template class PairMLIPKokkos<LMPHostType>;
#endif
}    // namespace LAMMPS_NS
