/* ----------------------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.

   pair_style mlip/kk: pair_style mlip on Kokkos views (see pair_mlip_kokkos.h).

   Per model call: kernels count each source atom's edges inside the cutoff, number the
   neighbours they reach, and fill the edge list and edge vectors into views; the views are
   wrapped as tensors (mlip::evaluate_graph, no copy for float64 models on the views' device);
   the energies and edge gradients are wrapped back as unmanaged views and scattered by the
   per-edge terms shared with pair_style mlip (pair_mlip_scatter.h).

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

#include "pair_mlip_scatter.h"

#include "mlip/device.h"
#include "mlip/error.h"
#include "mlip/model.h"

#include <algorithm>
#include <chrono>
#include <type_traits>

using namespace LAMMPS_NS;

namespace {

using Clock = std::chrono::steady_clock;

// Serial runs one kernel thread: plain adds. Every other execution space adds atomically.
template <class Space> struct NeedsAtomics : std::true_type {};
#ifdef KOKKOS_ENABLE_SERIAL
template <> struct NeedsAtomics<Kokkos::Serial> : std::false_type {};
#endif

// Where the views of DeviceType live, as a LibTorch device: the host, or the GPU Kokkos runs on
// (-k on g N gives each rank one). The CUDA branch has not been compiled yet: no Kokkos with
// CUDA could be built here (README "GPUs").
template <class DeviceType> torch::Device tensor_device()
{
  if (std::is_same<typename DeviceType::memory_space, Kokkos::HostSpace>::value) return torch::kCPU;
  int index = 0;
#ifdef KOKKOS_ENABLE_CUDA
  index = Kokkos::Cuda().cuda_device();
#endif
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

// The views the outputs go to; the per-call totals (energy, global virial) go to the reduction
// value of the kernel, through Tally below.
template <class DeviceType, class CentroidView> struct ViewSink {
  static constexpr bool atomic = NeedsAtomics<typename DeviceType::execution_space>::value;
  typename ArrayTypes<DeviceType>::t_f_array f;
  typename ArrayTypes<DeviceType>::t_efloat_1d eatom;
  typename ArrayTypes<DeviceType>::t_virial_array vatom;
  CentroidView cvatom;

  KOKKOS_INLINE_FUNCTION static void add(double &to, double value)
  {
    if (atomic) Kokkos::atomic_add(&to, value);
    else to += value;
  }
  KOKKOS_INLINE_FUNCTION void add_force(int i, double x, double y, double z) const
  {
    add(f(i, 0), x);
    add(f(i, 1), y);
    add(f(i, 2), z);
  }
  KOKKOS_INLINE_FUNCTION void add_energy_atom(int i, double e) const { add(eatom(i), e); }
  KOKKOS_INLINE_FUNCTION void add_virial_atom(int i, const double *v) const
  {
    for (int k = 0; k < 6; k++) add(vatom(i, k), v[k]);
  }
  KOKKOS_INLINE_FUNCTION void add_centroid_atom(int i, const double *cv) const
  {
    for (int k = 0; k < 9; k++) add(cvatom(i, k), cv[k]);
  }
};

template <class Sink> struct Tally {
  const Sink &sink;
  EV_FLOAT &ev;
  KOKKOS_INLINE_FUNCTION void add_energy(double e) const { ev.evdwl += e; }
  KOKKOS_INLINE_FUNCTION void add_virial(const double *v) const
  {
    for (int k = 0; k < 6; k++) ev.v[k] += v[k];
  }
  KOKKOS_INLINE_FUNCTION void add_force(int i, double x, double y, double z) const { sink.add_force(i, x, y, z); }
  KOKKOS_INLINE_FUNCTION void add_energy_atom(int i, double e) const { sink.add_energy_atom(i, e); }
  KOKKOS_INLINE_FUNCTION void add_virial_atom(int i, const double *v) const { sink.add_virial_atom(i, v); }
  KOKKOS_INLINE_FUNCTION void add_centroid_atom(int i, const double *cv) const { sink.add_centroid_atom(i, cv); }
};

template <class View> void grow(View &view, int n, const char *name)
{
  if (static_cast<int>(view.extent(0)) < n) view = View(Kokkos::ViewAllocateWithoutInitializing(name), n + n / 4 + 16);
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
    // LibTorch's CUDA backend, loaded before the model (mlip/device.h).
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
  grow(d_node_atom, nall + chunk_size, "mlip/kk:node_atom");
  grow(d_node_species, nall + chunk_size, "mlip/kk:node_species");
  {
    auto atom_species = d_atom_species;
    auto type_species_v = d_type_species;
    auto type_v = type;
    Kokkos::parallel_for(
        Kokkos::RangePolicy<DeviceType>(0, nall),
        KOKKOS_LAMBDA(int a) { atom_species(a) = type_species_v(type_v(a)); });
  }

  if (layers > 1) {
    evaluate_sources(0, list->inum + list->gnum, true);
  } else {
    for (int first = 0; first < list->inum; first += chunk_size)
      evaluate_sources(first, std::min(chunk_size, list->inum - first), false);
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
   evaluate_sources: graph of sources ilist[first, first + count), model call, outputs.
   whole_halo: node = atom for all owned and ghost atoms, centres = owned atoms.
------------------------------------------------------------------------- */

template <class DeviceType>
void PairMLIPKokkos<DeviceType>::evaluate_sources(int first, int count, bool whole_halo)
{
  if (count <= 0) return;
  auto t0 = Clock::now();
  const int nall = atom->nlocal + atom->nghost;
  const double cut2 = cutoff * cutoff;
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
            if (atom_species(j) < 0) continue;
            const double dx = xv(j, 0) - xv(a, 0), dy = xv(j, 1) - xv(a, 1), dz = xv(j, 2) - xv(a, 2);
            if (dx * dx + dy * dy + dz * dz >= cut2) continue;
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

  // 4. Edge offsets (exclusive scan of the counts), then the edges themselves.
  int n_edges = 0;
  Kokkos::parallel_scan(
      Range(0, count),
      KOKKOS_LAMBDA(int s, int &update, const bool final) {
        const int n = offset(s);
        if (final) offset(s) = update;
        update += n;
      },
      n_edges);
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
          if (atom_species(j) < 0) continue;
          const double dx = xv(j, 0) - xv(a, 0), dy = xv(j, 1) - xv(a, 1), dz = xv(j, 2) - xv(a, 2);
          if (dx * dx + dy * dy + dz * dz >= cut2) continue;
          edge_index(0, e) = centre;
          edge_index(1, e) = atom_node(j);
          edge_vectors(e, 0) = dx;
          edge_vectors(e, 1) = dy;
          edge_vectors(e, 2) = dz;
          e++;
        }
      });
  if (timing) {
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
  mlip::ModelOutput out;
  try {
    out = mlip::evaluate_graph(model(), graph);
  } catch (const mlip::Error &e) {
    error->one(FLERR, std::string("pair_style mlip/kk: model evaluation failed: ") + e.what());
  } catch (const c10::Error &e) {
    error->one(FLERR, std::string("pair_style mlip/kk: model evaluation failed: ") + e.what_without_backtrace());
  }
  if (timing) {
    Kokkos::fence();
    add_time(MODEL, std::chrono::duration<double>(Clock::now() - t0).count());
    t0 = Clock::now();
  }

  // 6. Outputs: the result tensors (owned by `out`, alive until the end of this function) seen
  // as unmanaged views, scattered with the terms shared with pair_style mlip.
  typedef Kokkos::MemoryTraits<Kokkos::Unmanaged> Unmanaged;
  Kokkos::View<const double *, DeviceType, Unmanaged> energy(out.atom_energy.data_ptr<double>(), n_centers);
  Kokkos::View<const double **, Kokkos::LayoutRight, DeviceType, Unmanaged> grad(out.edge_grad.data_ptr<double>(),
                                                                                 n_edges, 3);
  auto cv = k_cvatom.template view<DeviceType>();
  typedef ViewSink<DeviceType, std::decay_t<decltype(cv)>> Sink;
  const Sink sink{f, k_eatom.template view<DeviceType>(), k_vatom.template view<DeviceType>(), cv};
  const mlip_scatter::Requests req{eflag_global != 0, eflag_atom != 0, vflag_global != 0, vflag_atom != 0,
                                   cvflag_atom != 0};
  EV_FLOAT totals;
  if (eflag_either) {
    EV_FLOAT ev;
    Kokkos::parallel_reduce(
        Range(0, n_centers),
        KOKKOS_LAMBDA(int c, EV_FLOAT &acc) {
          const int a = node_atom(c);
          if (atom_species(a) < 0) return;    // a NULL-type local atom gets no energy
          mlip_scatter::centre(Tally<Sink>{sink, acc}, req, a, energy(c));
        },
        ev);
    totals += ev;
  }
  {
    EV_FLOAT ev;
    Kokkos::parallel_reduce(
        Range(0, n_edges),
        KOKKOS_LAMBDA(int e, EV_FLOAT &acc) {
          const int i = node_atom(edge_index(0, e));
          const int j = node_atom(edge_index(1, e));
          const double r[3] = {edge_vectors(e, 0), edge_vectors(e, 1), edge_vectors(e, 2)};
          const double g[3] = {grad(e, 0), grad(e, 1), grad(e, 2)};
          mlip_scatter::edge(Tally<Sink>{sink, acc}, req, i, j, r, g);
        },
        ev);
    totals += ev;
  }
  if (eflag_global) eng_vdwl += totals.evdwl;
  if (vflag_global)
    for (int k = 0; k < 6; k++) virial[k] += totals.v[k];

  // Ready for the next chunk: no atom has a node.
  if (!whole_halo) Kokkos::parallel_for(Range(0, n_nodes), KOKKOS_LAMBDA(int k) { atom_node(node_atom(k)) = -1; });
  if (timing) {
    Kokkos::fence();
    add_time(FORCES, std::chrono::duration<double>(Clock::now() - t0).count());
  }
}

namespace LAMMPS_NS {
template class PairMLIPKokkos<LMPDeviceType>;
#ifdef LMP_KOKKOS_GPU
template class PairMLIPKokkos<LMPHostType>;
#endif
}    // namespace LAMMPS_NS
