/* ----------------------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.

   'pair_style mlip model.pt graph device': the MD step's graph made where the model runs. The
   positions (local and ghost atoms) and their species go to the device once; the cell list, the
   halo of a message-passing model (atoms within L-1 hops send along all their edges) and the edge
   list are built there (mlip/model/device_graph.h), the model runs on them, and the forces and
   virials are summed there too (mlip::edge_forces); energies, node forces and virials come back
   once. LAMMPS's neighbour list is not read. The atoms are binned once a step; the local atoms go
   through the model in calls sized by the GPU's free memory (mlip/model/device_memory.h) or of at
   most 'chunk' atoms, each with its own graph. On the CPU the same code runs (the device kernels'
   loop): what the tests compare with the host graph.
------------------------------------------------------------------------- */

#include "pair_mlip.h"
#include "pair_mlip_impl.h"

#include "mlip/model/device.h"
#include "mlip/ops/operators.h"

#include "atom.h"
#include "comm.h"
#include "error.h"
#include "force.h"
#include "neighbor.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <numeric>
#include <optional>

using namespace LAMMPS_NS;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0)
{
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// A part of the step's work on `device` done, where the parts are timed ('timing yes'): kernels
// run after their launch returns, so that the host's clock would otherwise give a part's GPU work
// to the next part that waits for it. Inside the part's guarded() call: an error the wait brings
// up is that part's.
void finish_part(const torch::Device &device, bool timed)
{
  if (timed) mlip::synchronize(device);
}

}    // namespace

/* ----------------------------------------------------------------------
   init_device_graph: 'graph device' takes the plain style's one model
------------------------------------------------------------------------- */

void PairMLIP::init_device_graph()
{
  if (!options.device_graph) return;
  const char *why = exchanging()     ? "the ghost exchange (drop 'exchange yes': the graph carries the halo)"
                    : committee_size() > 1 ? "several models"
                    : kokkosable           ? "mlip/kk"
                                           : nullptr;
  if (why) error->all(FLERR, std::string("pair_style mlip: graph device is not for ") + why);
  if (const std::string no_kernels = mlip::device_kernels_unavailable(impl->model->device()); !no_kernels.empty())
    error->one(FLERR, "pair_style mlip: graph device builds the graph with mlip's CUDA kernels (libmlip_cuda_ops.so): " +
                          no_kernels + " (or use graph host)");
  if (comm->me == 0)
    utils::logmesg(lmp, "pair_style mlip: graph device: the neighbour graph{} is built on {} from the positions, "
                        "forces and virials summed there\n",
                   layers > 1 ? fmt::format(" with its halo of {} x {} A", layers - 1, cutoff) : "",
                   impl->model->device().str());
}

// init_style's part: LAMMPS's neighbour list is not read, so nothing it would leave out may be
// asked for (pairs excluded by neigh_modify exclude, bonded pairs by special_bonds lj 0).
void PairMLIP::check_device_graph_settings()
{
  if (neighbor->nex_type || neighbor->nex_group || neighbor->nex_mol)   // 'exclude' is set after init_style
    error->all(FLERR, "pair_style mlip: graph device builds its own graph and cannot leave out the pairs "
                      "'neigh_modify exclude' excludes: use graph host");
  if (neighbor->includegroup)
    error->all(FLERR, "pair_style mlip: graph device takes every local atom as a centre, not only the group "
                      "'neigh_modify include' names: use graph host");
  if (atom->molecular != Atom::ATOMIC)
    for (int k = 1; k <= 3; k++)
      if (force->special_lj[k] != 1.0)
        error->all(FLERR, "pair_style mlip: graph device builds its own graph with every pair within the cutoff, "
                          "bonded ones too: 'special_bonds lj 1 1 1' says so (or use graph host)");
}

/* ----------------------------------------------------------------------
   compute_device_graph: positions there once, the cell list, then the local atoms in calls
   (sized by the free memory on a GPU without 'chunk', else of at most 'chunk' atoms)
------------------------------------------------------------------------- */

void PairMLIP::compute_device_graph()
{
  Impl &s = *impl;
  const auto t0 = Clock::now();
  const torch::Device device = s.model->device();
  const int n = atom->nlocal + atom->nghost;
  s.atom_species.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; i++) s.atom_species[i] = type_species[atom->type[i]];
  torch::Tensor x = torch::from_blob(atom->x[0], {n, 3}, torch::kFloat64).to(device);
  if (distance_unit != 1.0) x = x * (1.0 / distance_unit);    // the graph is in A, as the model
  const torch::Tensor species = torch::from_blob(s.atom_species.data(), {n}, torch::kInt64).to(device);
  std::unique_ptr<mlip::DeviceGraphBuilder> cells;
  guarded(error, false, "graph device", [&] {
    cells = std::make_unique<mlip::DeviceGraphBuilder>(x, species, cutoff);
    finish_part(device, options.timing);
  });
  add_time(GRAPH, seconds_since(t0));
  const int nlocal = atom->nlocal;
  if (s.sizer) {
    const int64_t limit = s.sizer->limit();
    sized_calls(error, "graph device", [&] {
      mlip::evaluate_within_memory(
          0, nlocal, *s.sizer, [this] { return available_memory(); },
          [&](int64_t a, int64_t b) { evaluate_device_chunk(*cells, a, b); });
    });
    report_sizing(limit, nlocal);
    return;
  }
  const int size = int(mlip::equal_chunk(nlocal, options.chunk));
  for (int a = 0; a < nlocal; a += size) evaluate_device_chunk(*cells, a, std::min(nlocal, a + size));
}

// The local atoms [first, last) as centres: graph, model and forces on the device, the outputs
// back; under the sizer, the call's memory measured, and nothing added when it runs out.
void PairMLIP::evaluate_device_chunk(const mlip::DeviceGraphBuilder &cells, int64_t first, int64_t last)
{
  Impl &s = *impl;
  auto t0 = Clock::now();
  const torch::Device device = s.model->device();
  const bool sized = static_cast<bool>(s.sizer);
  s.device_graph = mlip::DeviceGraph{};   // the last call's, before this one is measured
  std::optional<mlip::DeviceMemory> before;
  if (sized && s.measure_call()) {
    mlip::reset_peak_memory(device);
    before = mlip::device_memory(device);
  }
  mlip::ModelOutput out;
  mlip::EdgeForces ef;
  try {   // a call that runs out of memory holds none of it when the caller frees the cache
    guarded(
        error, false, "graph device",
        [&] {
          s.device_graph = cells.build(first, last, std::max(layers, 1));
          finish_part(device, options.timing);
        },
        sized);
    add_time(GRAPH, seconds_since(t0));
    if (s.device_graph.n_centers == 0) return;
    t0 = Clock::now();
    const mlip::GraphView view = s.device_graph.view();
    guarded(
        error, false, "model evaluation failed",
        [&] {
          out = mlip::evaluate_graph(*s.model, view);
          finish_part(device, options.timing);
        },
        sized);
    add_time(MODEL, seconds_since(t0));
    t0 = Clock::now();
    mlip::EdgeForceRequest request;
    request.virial = vflag_global != 0;
    request.node_virial = vflag_atom || cvflag_atom;
    guarded(
        error, false, "forces",
        [&] {
          ef = mlip::edge_forces(view, out.edge_grad, request);
          to_lammps_units(out, ef);
          // Back to the host, once each.
          out.atom_energy = out.atom_energy.cpu();
          ef.forces = ef.forces.cpu();
          if (ef.virial.defined()) ef.virial = ef.virial.cpu();
          if (ef.node_virial.defined()) ef.node_virial = ef.node_virial.cpu();
        },
        sized);
  } catch (...) {
    s.device_graph = mlip::DeviceGraph{};
    throw;
  }
  const mlip::DeviceGraph &g = s.device_graph;
  if (before)
    if (const auto after = mlip::device_memory(device))
      s.sizer->observe(g.n_centers, g.n_edges(), after->peak - before->allocated);
  check_device_distances();
  const torch::Tensor node_atom = g.node_atom.cpu();
  s.node_atom.assign(node_atom.data_ptr<int64_t>(), node_atom.data_ptr<int64_t>() + node_atom.numel());
  add_outputs(out.atom_energy.data_ptr<double>(), ef, s.node_atom.data(), g.n_centers);
  s.device_graph = mlip::DeviceGraph{};   // its memory free for the next call
  add_time(FORCES, seconds_since(t0));
}

// 'graph device cuda_graph yes|eager': the whole step with static shapes, recorded as one CUDA
// graph (mlip/model/device_step.h), its model calls in chunks where memory asks; results per atom,
// one copy back. The timing parts: the host's own work (the species here, the step's staging and
// unpacking: mlip::StepOutput::host_seconds) as graph, the rest of the step (the device's work, the
// launches, copies and waits) as model, the host's sums into LAMMPS's arrays as forces.
void PairMLIP::compute_device_step()
{
  Impl &s = *impl;
  auto t0 = Clock::now();
  const int n = atom->nlocal + atom->nghost;
  s.atom_species.resize(static_cast<std::size_t>(n));
  for (int i = 0; i < n; i++) s.atom_species[i] = type_species[atom->type[i]];
  const double species_seconds = seconds_since(t0);
  t0 = Clock::now();
  const mlip::StepOutput step = evaluate_step(n, vflag_atom || cvflag_atom);
  const double step_seconds = seconds_since(t0);
  add_time(GRAPH, species_seconds + step.host_seconds);
  add_time(MODEL, std::max(0.0, step_seconds - step.host_seconds));
  t0 = Clock::now();
  if (step.shortest < min_distance) {   // rare: the device graph of the same atoms names them
    const torch::Tensor x = torch::from_blob(atom->x[0], {n, 3}, torch::kFloat64) * (1.0 / distance_unit);
    const torch::Tensor species = torch::from_blob(s.atom_species.data(), {n}, torch::kInt64);
    s.device_graph = mlip::build_device_graph(x, species, atom->nlocal, cutoff, 1);
    check_device_distances();
  }
  mlip::ModelOutput out;
  out.atom_energy = step.atom_energy;
  mlip::EdgeForces ef;
  ef.forces = step.forces;
  ef.virial = step.virial.view({1, 9});
  ef.node_virial = step.atom_virial;
  to_lammps_units(out, ef);
  s.node_atom.resize(static_cast<std::size_t>(n));
  std::iota(s.node_atom.begin(), s.node_atom.end(), 0);
  add_outputs(out.atom_energy.data_ptr<double>(), ef, s.node_atom.data(), atom->nlocal);
  add_time(FORCES, seconds_since(t0));
}

// The whole step, its model calls in chunks of at most 'chunk N' local atoms, or on a GPU of what
// the sizer says fits (all in one until a step's memory was measured); a step that runs out of
// GPU memory is evaluated again in chunks of half as many atoms (nothing of it was added), down to
// one atom a chunk.
mlip::StepOutput PairMLIP::evaluate_step(int n, bool atom_virial)
{
  Impl &s = *impl;
  const int nlocal = atom->nlocal;
  const int64_t limit = s.sizer ? s.sizer->limit() : 0;
  int64_t chunk = s.step_chunk;
  if (s.sizer) chunk = s.sizer->seen() ? s.sizer->chunk(nlocal, available_memory()) : limit;
  const int64_t recordings = s.step->recordings(), measurements = s.step->measurements();
  mlip::StepOutput out;
  // A dump step's per-atom virials run unrecorded on top of the recording's memory: when they run
  // out of it, the recording (dropped by then) gives its memory back, and the step is tried again
  // in the same chunks before in more (which a recording would keep for good).
  bool retried_alone = !atom_virial || recordings == 0;
  // The local atoms of a call (a failed step forgets its capacity: taken before).
  const int64_t held = std::max<int64_t>(1, s.step->capacity().chunks);
  int64_t tried = std::min<int64_t>(chunk > 0 ? chunk : nlocal, (nlocal + held - 1) / held);
  for (;;) {
    try {
      guarded(
          error, false, "graph device cuda_graph",
          [&] {
            out = s.step->evaluate(n > 0 ? atom->x[0] : nullptr, 1.0 / distance_unit, s.atom_species.data(), n,
                                   nlocal, atom_virial, chunk);
          },
          s.sizer != nullptr);
      break;
    } catch (const std::exception &e) {   // guarded() passes on only running out of GPU memory (sized)
      if (!s.sizer || !mlip::is_out_of_memory(e) || tried <= 1)
        error->one(FLERR, std::string("pair_style mlip: graph device cuda_graph: ") + e.what() + mlip::out_of_memory_note(e));
      mlip::release_cached_memory();
      if (!retried_alone) {
        retried_alone = true;
        chunk = tried;   // the failed step's chunks (it forgot them)
        continue;
      }
      s.sizer->out_of_memory(tried);
      tried = chunk = std::max<int64_t>(1, tried / 2);
    }
  }
  const mlip::StepMemory &m = s.step->memory();
  if (s.sizer && s.step->measurements() != measurements && m.bytes > 0) s.sizer->observe(m.centres, m.edges, m.bytes);
  const int64_t chunks = std::max<int64_t>(1, s.step->capacity().chunks);
  if (s.sizer) report_sizing(limit, nlocal, (nlocal + chunks - 1) / chunks);
  return out;
}

// check_distances() for the device graph: its shortest edge, read after the model call.
void PairMLIP::check_device_distances()
{
  const mlip::DeviceGraph &g = impl->device_graph;
  if (g.n_edges() == 0) return;
  // The shortest edge and its index in one copy back.
  const auto [r2, e] = g.edge_vectors.square().sum(1).min(0);
  const torch::Tensor both = torch::stack({r2, e.to(torch::kFloat64)}).cpu();
  const double r = std::sqrt(both[0].item<double>());
  if (r >= min_distance) return;
  const torch::Tensor ends =
      g.node_atom.index_select(0, g.edge_index.select(1, static_cast<int64_t>(both[1].item<double>()))).cpu();
  close_atoms_error(static_cast<int>(ends[0].item<int64_t>()), static_cast<int>(ends[1].item<int64_t>()), r);
}
