/* ----------------------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.

   pair_style mlip MODEL [MODEL2 ...] [keywords] (the keywords: pair_mlip_keywords.cpp)
   pair_coeff * * El1 El2 ... (element per LAMMPS type, NULL = not handled by the model)

   The model (common/include/mlip/model/model.h) returns per-atom energies and dE/dr_ij from the
   edge vectors of a graph; mlip::edge_forces (common/) makes per-node forces and virials of them,
   which are added to LAMMPS's atoms here (those on ghosts go back by reverse communication).

   Local atoms are evaluated in chunks of at most N per model call, so that the memory of a
   call does not grow with the number of atoms a rank holds. Local models (0 or 1
   message-passing layer) see only the neighbours of each centre: a chunk is N consecutive
   local atoms. A model with L > 1 layers sees L neighbour shells: the graph of a chunk covers
   its centres and every atom (local or ghost) within L-1 hops of them, all with their edges,
   plus the atoms one hop further as message senders only; the ghost shell is L*cutoff wide.
   Such a halo is recomputed by every chunk that touches it, so message-passing chunks are
   large by default and spatially compact (recursive coordinate bisection of the local atoms).

   With 'device cuda' (or auto, when a GPU is visible) the model runs on the rank's GPU (the
   node-local rank modulo the visible GPUs, mlip/model/device.h): the graph is built on the host and
   copied once per model call, energies and edge gradients come back once, and by default the
   calls are sized by the GPU's free memory (all local atoms in one where they fit, so once per
   step). 'cuda_graph yes' records that call as a CUDA graph, on a graph grouped and padded to
   static sizes (mlip/model/graph_capture.h), and replays it for each call (the chunks of a step
   share the recording, padded to the largest).
------------------------------------------------------------------------- */

#include "pair_mlip.h"

#include "atom.h"
#include "comm.h"
#include "error.h"
#include "force.h"
#include "memory.h"
#include "neigh_list.h"
#include "neigh_request.h"
#include "neighbor.h"
#include "update.h"

#include "pair_mlip_impl.h"
#include "pair_mlip_outputs.h"

#include "mlip/graph/chunk_graph.h"
#include "mlip/model/device.h"
#include "mlip/data/elements.h"
#include "mlip/error.h"
#include "mlip/model/model.h"
#include "mlip/model/runtime.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

using namespace LAMMPS_NS;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0)
{
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Peak resident memory of this process in MiB (-1 where the platform does not report it).
double peak_rss_mib()
{
  const int64_t bytes = mlip::peak_resident_bytes();
  return bytes < 0 ? -1.0 : static_cast<double>(bytes) / (1 << 20);
}

// "O H": a model's species for messages (fmt::join moved between the fmt versions that LAMMPS
// releases bundle, and utils::join_words is newer than 29Sep2021).
std::string joined(const std::vector<std::string> &words)
{
  std::string out;
  for (const auto &w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

}    // namespace


/* ----------------------------------------------------------------------
   constructor: style flags only; the model is loaded by settings()
------------------------------------------------------------------------- */

// Default chunk for local models, 64: of 64, 256, 1024 and 4096 local atoms per model call,
// 64 was the fastest on average for the se_e2_a water model (10k atoms, 1 rank,
// benchmarks/bench_pair.sh, 3 scans: 309-336, 339, 312-354 and 556 us/atom-step) and needs the
// least memory (0.3, 0.6, 1.9 and 5.3 GB peak): small blocks keep the model's working set in cache.
constexpr int default_chunk_local = 64;
// Compressed local models (mlip-trainer compress), 1024: without the embedding matrix, the fitting
// net's matrix products dominate and want tall blocks (a scan of chunks on the compressed water
// model: COMPRESSED_SCAN=1 benchmarks/bench_pair.sh).
constexpr int default_chunk_compressed = 1024;
// Default chunk for message-passing models, 128: each chunk also evaluates its halo (atoms
// within (L-1) cutoffs, with all their edges), so small chunks repeat work and large ones need
// memory. PaiNN with default hyperparameters (64 features, 2 layers, rc 5 A), 1 rank:
// 1152 water atoms (benchmarks/bench_pair.sh's PaiNN chunk scan), chunk 16, 64, 128, 256 and
// all: 2346, 1484, 1208, 1043 and 7768 us/atom-step, peak 0.5, 1.1, 1.5, 2.0 and 7.8 GB; 10368
// atoms (its in.mlip, water-10k.data, 1 step, 'chunk N timing yes'), chunk 128 and 256: 1190
// and 891 us/atom-step, 1.5 and 2.6 GB. Since malloc no longer trims the heap and TorchScript
// runs op by op (mlip/model/runtime.h, mlip/model/model.h), 1152 atoms: chunk 128 1084 us/atom-step and
// 0.8 GB, all 946 us/atom-step and 3.4 GB. 128 keeps a rank under 1 GB; raise it where memory
// allows.
constexpr int default_chunk_message_passing = 128;
// Message-passing models with ghost exchange, 128: with more local atoms than the chunk, each
// layer is evaluated again in the backward pass (chunk by chunk), which bounds memory. PaiNN with
// 32 features, 3 layers, 12288 water atoms on 2 ranks (benchmarks/bench_mp_cost.sh, 2026-11-25),
// chunk 64, 128 and 512: float64 125, 122 and 141 us/atom-step, 366, 364 and 457 MiB per rank;
// float32 64, 53 and 62 us/atom-step, 291, 287 and 336 MiB.
constexpr int default_chunk_exchange = 128;
// On a GPU: all local atoms in one call (a GPU needs large calls to be busy; its memory, not the
// cache, is the limit, and 'chunk N' bounds it).
constexpr int default_chunk_gpu = 1 << 30;

// The rank of this process among the ranks of `world` on the same node (shared memory).
static int node_local_rank(MPI_Comm world)
{
#ifdef MPI_COMM_TYPE_SHARED
  MPI_Comm node;
  int rank = 0;
  if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) != MPI_SUCCESS) return 0;
  MPI_Comm_rank(node, &rank);
  MPI_Comm_free(&node);
  return rank;
#else
  int rank = 0;
  MPI_Comm_rank(world, &rank);    // no shared-memory split in this MPI (LAMMPS's serial stubs)
  return rank;
#endif
}

// How many ranks of this node use the GPU this rank uses (`bus`: its PCI bus id, the same under
// any CUDA_VISIBLE_DEVICES; "" on the CPU), a collective of `world`. Where a rank's bus id cannot
// be read: the ranks that take its GPU in turn (node-local rank modulo the `gpus` it sees).
static int ranks_sharing_gpu([[maybe_unused]] MPI_Comm world, const std::string &bus, int gpus)
{
  constexpr int width = 32;
  char mine[width] = {0};
  bus.copy(mine, width - 1);
  int rank = 0, size = 1, same = 0;
  std::vector<char> all(width);
#ifdef MPI_COMM_TYPE_SHARED
  MPI_Comm node;
  if (MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_rank(node, &rank);
    MPI_Comm_size(node, &size);
    all.resize(static_cast<std::size_t>(width) * size);
    MPI_Allgather(mine, width, MPI_CHAR, all.data(), width, MPI_CHAR, node);
    MPI_Comm_free(&node);
  }
#endif
  if (bus.empty()) return std::max(1, (size - 1 - rank % std::max(gpus, 1)) / std::max(gpus, 1) + 1);
  for (int r = 0; r < size; r++) same += std::strncmp(all.data() + static_cast<std::size_t>(width) * r, mine, width) == 0;
  return std::max(1, same);
}

PairMLIP::PairMLIP(LAMMPS *lmp) :
    Pair(lmp), impl(new Impl(lmp)), layers(0), cutoff(0.0), list_cutoff(0.0), message_reach(0.0), distance_unit(1.0),
    energy_unit(1.0)
{
  single_enable = 0;          // many-body: no pairwise single()
  restartinfo = 0;            // the model file is the state; pair_style/pair_coeff are re-read
  one_coeff = 1;              // pair_coeff * * only
  manybody_flag = 1;
  // The virial is summed edge by edge in compute() (exact with chunking), not from f dot r.
  no_virial_fdotr_compute = 1;
  // Per-atom centroid virial: each edge's -r_ij (x) dE/dr_ij goes to the neighbour atom j
  // (the form of Fan et al., PRB 92, 094301), which makes Green-Kubo heat flux correct.
  centroidstressflag = CENTROID_AVAIL;
  // Before the first tensor operation of the process (the model is loaded in settings()).
  mlip::prefer_avx512_kernels();
}

/* ----------------------------------------------------------------------
   destructor: frees the per-type arrays (the model goes with impl)
------------------------------------------------------------------------- */

PairMLIP::~PairMLIP()
{
  if (allocated) {
    memory->destroy(setflag);
    memory->destroy(cutsq);
    memory->destroy(cutghost);
  }
}

/* ----------------------------------------------------------------------
   allocate: per-type arrays LAMMPS reads (setflag, cutsq, cutghost)
------------------------------------------------------------------------- */

void PairMLIP::allocate()
{
  allocated = 1;
  const int n = atom->ntypes;
  memory->create(setflag, n + 1, n + 1, "pair:setflag");
  memory->create(cutsq, n + 1, n + 1, "pair:cutsq");
  memory->create(cutghost, n + 1, n + 1, "pair:cutghost");
  for (int i = 1; i <= n; i++)
    for (int j = i; j <= n; j++) setflag[i][j] = 0;
}

/* ----------------------------------------------------------------------
   settings: pair_style mlip MODEL [MODEL2 ...] [keywords] (pair_mlip_keywords.cpp has the
   keywords); loads the models on every rank and chooses how they are evaluated
------------------------------------------------------------------------- */

void PairMLIP::settings(int narg, char **arg)
{
  const std::vector<std::string> files = parse_settings(narg, arg);
  const std::string device_note = load_models(files);   // the device chosen first (mlip/model/device.h)
  mlip::set_deterministic(options.deterministic);        // before the models' first GPU matrix product
  const bool malloc_tuned = mlip::keep_freed_memory();
  const bool chunk_given = options.chunk > 0;
  // mlip/kk sizes its device views by the chunk: it keeps the CPU defaults.
  const bool one_call = !impl->model->device().is_cpu() && !kokkosable;
  // The device graph carries the halo of message-passing models: no exchange unless asked.
  if (options.device_graph && options.exchange == mlip_pair::Options::Exchange::automatic)
    options.exchange = mlip_pair::Options::Exchange::no;
  impl->exchange.init(options.exchange, *impl->model, model_file, committee_size() > 1,
                      kokkosable && execution_space == Device);
  init_cuda_graph(one_call);
  init_device_graph();
  impl->step_chunk = chunk_given ? options.chunk : 0;
  if (!chunk_given) options.chunk = options.device_graph ? default_chunk_gpu : default_chunk(one_call);
  init_sizer(one_call && !chunk_given);
  set_reach();
  // LAMMPS's buffers, per atom: the widest communication of a job (ghost features, committee forces).
  comm_forward = impl->exchange.width();
  comm_reverse = std::max(impl->exchange.width(), impl->committee.reverse_width());
  log_settings(device_note, one_call, chunk_given, malloc_tuned);
}

// The model files before the keywords; the keywords into `options`.
std::vector<std::string> PairMLIP::parse_settings(int narg, char **arg)
{
  using mlip_pair::is_keyword;
  if (narg < 1 || is_keyword(arg[0]))
    error->all(FLERR, "Illegal pair_style mlip command: expected '" + mlip_pair::synopsis() + "'");
  std::vector<std::string> files;
  int iarg = 0;
  for (; iarg < narg && !is_keyword(arg[iarg]); iarg++) {
    // After the first model: a word that is no file is a misspelt keyword more likely than a model.
    if (iarg > 0 && !std::ifstream(arg[iarg]).good())
      error->all(FLERR, fmt::format("pair_style mlip: unknown keyword '{}' (known: {}), and no model file of that name",
                                    arg[iarg], mlip_pair::keyword_names()));
    files.emplace_back(arg[iarg]);
  }
  try {
    options = mlip_pair::parse_keywords(narg - iarg, arg + iarg, files.size());
  } catch (const mlip::Error &e) {
    error->all(FLERR, std::string("pair_style mlip: ") + e.what());
  }
  return files;
}

// The model that drives the dynamics and the committee's others, on the device asked for.
std::string PairMLIP::load_models(const std::vector<std::string> &files)
{
  model_file = files[0];
  std::string device_note;
  std::string device;
  // Before any other LibTorch call that asks about CUDA (mlip/model/device.h).
  guarded(error, true, "device", [&] { device = model_device(options.device, device_note); });
  guarded(error, true, "cannot load model", [&] {
    impl->model = std::make_unique<mlip::Model>(mlip::Model::load(model_file, torch::Device(device)));
  });
  if (!options.head.empty())
    guarded(error, true, model_file, [&] { impl->model->select_head(options.head); });
  load_committee(files, device);
  cutoff = impl->model->info().cutoff;
  layers = impl->model->info().message_passing_layers;
  return device_note;
}

// On a GPU without 'chunk': calls sized by the free memory, where the memory can be known
// (libmlip_cuda_ops.so) and the model is not exchanging ghost features (its chunks are its own);
// with 'cuda_graph yes' the recording is made at the size of the calls, and made again smaller
// when one runs out of memory (GraphCapture forgets a failed call's capacity). A committee's other
// models run in the first model's calls on the steps that report the deviation, whose calls are
// measured and sized apart (evaluate_chunk).
void PairMLIP::init_sizer(bool wanted)
{
  impl->sizers = {};
  impl->sizer = nullptr;
  impl->sizing_reported = {};
  impl->sized_calls = {};
  // A collective of all ranks, before any returns: whether a rank sizes its calls is its own
  // (its device, its GPU's memory).
  const torch::Device device = impl->model->device();
  impl->gpu_sharing = ranks_sharing_gpu(world, device.is_cuda() ? mlip::gpu_bus_id(std::max<int>(device.index(), 0)) : "",
                                        device.is_cuda() ? mlip::cuda_device_count() : 1);
  if (!wanted || exchanging() || !mlip::device_memory(device))
    return;
  impl->sizers[0] = std::make_unique<mlip::ChunkSizer>();
  if (committee_size() > 1) impl->sizers[1] = std::make_unique<mlip::ChunkSizer>();
  impl->choose_sizer(false);
}

int PairMLIP::default_chunk(bool one_call) const
{
  return one_call ? default_chunk_gpu
         : exchanging() ? default_chunk_exchange
         : layers > 1 ? default_chunk_message_passing
         : impl->model->info().compressed ? default_chunk_compressed
                                          : default_chunk_local;
}

// The neighbour list covers every model's cutoff, the ghost shell every model's messages (one
// cutoff when the model's features are exchanged between layers instead).
void PairMLIP::set_reach()
{
  list_cutoff = cutoff;
  message_reach = layers > 1 && !exchanging() ? layers * cutoff : 0.0;
  for (const auto &m : impl->committee.members()) {
    list_cutoff = std::max(list_cutoff, m.cutoff);
    if (m.layers > 1) message_reach = std::max(message_reach, m.layers * m.cutoff);
  }
  // Neighbours of ghosts are needed when messages travel more than one hop. Set here, not in
  // init_style: pair_style hybrid reads the flag right after its sub-styles' settings().
  ghostneigh = message_reach > 0.0 && !options.device_graph ? 1 : 0;   // graph device: its own graph
}

void PairMLIP::log_settings(const std::string &device_note, bool one_call, bool chunk_given, bool malloc_tuned)
{
  if (comm->me != 0) return;
  const auto &meta = impl->model->info();
  const char *default_note = chunk_given ? "" : " (default; set with 'chunk N')";
  utils::logmesg(lmp, "pair_style mlip: {} model '{}', species {}, cutoff {} A, {} message-passing layers, {}, {}\n",
                 meta.architecture, model_file, joined(meta.species), meta.cutoff, meta.message_passing_layers,
                 meta.dtype, meta.digest_checked ? "file digest checked" : "no file digest (written by an older mlip)");
  utils::logmesg(lmp, "pair_style mlip: model on {}{}\n", device_note,
                 impl->sizer ? ", local atoms per call sized by the GPU's free memory (set a limit with 'chunk N')"
                 : one_call && !chunk_given ? ", all local atoms in one call (set a limit with 'chunk N')"
                                            : "");
  if (options.deterministic && !impl->model->device().is_cpu())
    utils::logmesg(lmp, "pair_style mlip: deterministic GPU kernels (sums in a fixed order: a repeated run repeats "
                        "bitwise)\n");
  if (malloc_tuned)
    utils::logmesg(lmp, "pair_style mlip: malloc keeps freed memory (mmap threshold 1 GiB, no trimming) "
                        "so that model buffers are reused between steps\n");
  if (impl->model->device().is_cpu()) {
    utils::logmesg(lmp, "pair_style mlip: LibTorch CPU kernels {} (ATEN_CPU_CAPABILITY), {} thread(s) per rank\n",
                   mlip::cpu_capability(), at::get_num_threads());
    if (const std::string note = mlip::threads_beyond_cores(at::get_num_threads()); !note.empty())
      error->warning(FLERR, "pair_style mlip: " + note + " (LibTorch's threads: OMP_NUM_THREADS)");
  }
  if (exchanging())
    utils::logmesg(lmp, "pair_style mlip: ghost exchange in chunks of at most {} local atoms{}\n", options.chunk,
                   default_note);
  if (layers > 1 && !one_call && !exchanging())
    utils::logmesg(lmp, "pair_style mlip: message-passing model: at most {} local atoms per model call{}, in "
                        "spatially compact chunks, each with its halo of {} x {} A\n",
                   options.chunk, default_note, layers - 1, cutoff);
}

/* ----------------------------------------------------------------------
   coeff: pair_coeff * * El1 El2 ... maps LAMMPS types to model species by element name
------------------------------------------------------------------------- */

void PairMLIP::coeff(int narg, char **arg)
{
  if (!impl->model) error->all(FLERR, "pair_coeff before pair_style mlip");
  if (!allocated) allocate();
  const int ntypes = atom->ntypes;
  if (narg != 2 + ntypes)
    error->all(FLERR, fmt::format("pair_coeff mlip: expected '* * ' followed by {} element names (one per atom type, "
                                  "NULL to skip a type), got {} words", ntypes, narg - 2));
  if (strcmp(arg[0], "*") != 0 || strcmp(arg[1], "*") != 0)
    error->all(FLERR, "pair_coeff mlip: the first two arguments must be '* *'");

  type_species = map_types(*impl->model, model_file, arg + 2);
  for (auto &m : impl->committee.members()) m.type_species = map_types(*m.model, m.file, arg + 2);
  int count = 0;
  for (int i = 1; i <= ntypes; i++)
    for (int j = i; j <= ntypes; j++) {
      setflag[i][j] = (type_species[i] >= 0 && type_species[j] >= 0) ? 1 : 0;
      count += setflag[i][j];
    }
  if (count == 0) error->all(FLERR, "pair_coeff mlip: every atom type is NULL");
}

// Model species per LAMMPS type (index 0 unused), from pair_coeff's element names; -1 = NULL.
std::vector<int> PairMLIP::map_types(const mlip::Model &m, const std::string &file, char **elements)
{
  const auto &meta = m.info();
  std::vector<int> species(atom->ntypes + 1, -1);
  for (int t = 1; t <= atom->ntypes; t++) {
    const std::string element = elements[t - 1];
    if (element == "NULL") continue;
    species[t] = meta.species_index(element);
    if (species[t] < 0)
      error->all(FLERR, fmt::format("pair_coeff mlip: element '{}' for atom type {} is not in model '{}' (species: {})",
                                    element, t, file, joined(meta.species)));
  }
  return species;
}

/* ----------------------------------------------------------------------
   init_style: checks, the ghost-shell width and the neighbour request
------------------------------------------------------------------------- */

void PairMLIP::init_style()
{
  if (!impl->model) error->all(FLERR, "pair_style mlip: no model loaded");
  set_units();
  // Forces land on ghost atoms (the far end of each edge) and must be reverse-communicated.
  if (force->newton_pair == 0) error->all(FLERR, "pair_style mlip requires 'newton on'");
  if (atom->tag_enable == 0) error->all(FLERR, "pair_style mlip requires atom IDs");
  warn_about_masses();
  if (options.device_graph) check_device_graph_settings();

  if (message_reach > 0.0) {
    // A local atom's energy depends on every atom within L hops of it, and ghosts up to L-1 hops
    // away need all their neighbours: the ghost shell must be L*cutoff wide, plus the skin
    // because atoms move between neighbour-list builds (rc + skin is LAMMPS's width for L = 1).
    if (comm->mode != Comm::SINGLE)
      error->all(FLERR, fmt::format("pair_style mlip: messages travel {} A in these models (message-passing "
                                    "layers x cutoff), which needs 'comm_modify mode single'", message_reach));
    const double needed = message_reach * distance_unit + neighbor->skin;
    if (comm->cutghostuser < needed) {
      comm->cutghostuser = needed;
      if (comm->me == 0)
        utils::logmesg(lmp, "pair_style mlip: message-passing layers x cutoff = {} A, + skin {}: communication "
                            "cutoff set to {} (as 'comm_modify cutoff {}')\n",
                       message_reach, neighbor->skin, needed, needed);
    }
  }
  init_deviation();

  // A full list: every centre sees all its neighbours, as the model's descriptors need. With
  // message passing, ghosts get lists too (cutghost from init_one) so that messages can be
  // passed between ghosts. 'graph device' builds its own graph and never reads LAMMPS's: its
  // list is occasional, built only if asked for (never), so that LAMMPS does not build a list of
  // every pair on the host at each reneighbouring (at 1M atoms about 2e8 pairs). The ghost shell
  // still follows the pair cutoff (init_one).
  const bool occasional = options.device_graph;
#if MLIP_LAMMPS_NEW_NEIGHBOR_API    // LAMMPS >= 24Mar2022 (see cmake/LammpsVersion.cmake)
  neighbor->add_request(this, (ghostneigh ? NeighConst::REQ_FULL | NeighConst::REQ_GHOST : NeighConst::REQ_FULL) |
                                  (occasional ? NeighConst::REQ_OCCASIONAL : 0));
#else
  const int irequest = neighbor->request(this, instance_me);
  neighbor->requests[irequest]->half = 0;
  neighbor->requests[irequest]->full = 1;
  neighbor->requests[irequest]->ghost = ghostneigh;
  neighbor->requests[irequest]->occasional = occasional ? 1 : 0;
#endif
}

/* ----------------------------------------------------------------------
   set_units: models work in eV and Angstrom; every LAMMPS unit style with physical units is
   converted with LAMMPS's own constants (update.cpp): 1 A is force->angstrom distance units and
   1 eV is force->boltz / (metal's boltz) energy units, so kB, and with it temperatures, stay
   consistent with the rest of LAMMPS. 'units lj' has no scale to convert to: an error.
------------------------------------------------------------------------- */

void PairMLIP::set_units()
{
  if (strcmp(update->unit_style, "lj") == 0)
    error->all(FLERR, fmt::format("pair_style mlip: model '{}' is in physical units (eV, A); 'units lj' has no scale "
                                  "to convert them to: use real, metal, si, cgs, electron, micro or nano",
                                  model_file));
  constexpr double boltz_metal = 8.617343e-5;    // LAMMPS's kB in eV/K (units metal)
  distance_unit = force->angstrom;
  energy_unit = strcmp(update->unit_style, "metal") == 0 ? 1.0 : force->boltz / boltz_metal;
  if (comm->me == 0 && (distance_unit != 1.0 || energy_unit != 1.0))
    utils::logmesg(lmp, "pair_style mlip: 'units {}': 1 A = {:.10g} distance units, 1 eV = {:.10g} energy units\n",
                   update->unit_style, distance_unit, energy_unit);
}

void PairMLIP::to_lammps_units(mlip::ModelOutput &out, mlip::EdgeForces &ef) const
{
  if (distance_unit == 1.0 && energy_unit == 1.0) return;
  torch::NoGradGuard no_grad;
  out.atom_energy.mul_(energy_unit);
  ef.forces.mul_(energy_unit / distance_unit);
  if (ef.virial.defined()) ef.virial.mul_(energy_unit);
  if (ef.node_virial.defined()) ef.node_virial.mul_(energy_unit);
}

/* ----------------------------------------------------------------------
   warn_about_masses: a type whose mass is not its element's (a type mapped to the wrong element
   in pair_coeff, or masses in another order) gets a warning; isotopes are a reason to ignore it
------------------------------------------------------------------------- */

void PairMLIP::warn_about_masses()
{
  if (comm->me != 0 || atom->mass == nullptr || atom->mass_setflag == nullptr) return;
  // Masses in g/mol (or amu) only: si, cgs, micro and nano use kg, g, pg and ag per atom.
  const std::string units = update->unit_style;
  if (units != "metal" && units != "real" && units != "electron") return;
  const auto &meta = impl->model->info();
  for (int t = 1; t <= atom->ntypes; t++) {
    if (t >= static_cast<int>(type_species.size()) || type_species[t] < 0 || !atom->mass_setflag[t]) continue;
    const std::string &element = meta.species[type_species[t]];
    const double expected = mlip::atomic_mass(mlip::atomic_number(element));
    if (std::abs(atom->mass[t] - expected) > 0.01 * expected)
      error->warning(FLERR, fmt::format("pair_style mlip: atom type {} is mapped to {} (pair_coeff) but its mass is {} "
                                        "(the element's is {:.4f}); fine for isotopes, else check pair_coeff and "
                                        "the masses",
                                        t, element, atom->mass[t], expected));
  }
}

/* ----------------------------------------------------------------------
   init_one: the model's cutoff for every type pair (ghost lists use the same one)
------------------------------------------------------------------------- */

double PairMLIP::init_one(int i, int j)
{
  cutghost[i][j] = cutghost[j][i] = list_cutoff * distance_unit;
  return list_cutoff * distance_unit;
}

/* ----------------------------------------------------------------------
   compute: graph -> model -> forces, energies, virials
------------------------------------------------------------------------- */

void PairMLIP::compute(int eflag, int vflag)
{
  begin_compute(eflag, vflag);
  begin_deviation();
  impl->choose_sizer(deviation_step());
  if (impl->step) {
    compute_device_step();
  } else if (options.device_graph) {
    compute_device_graph();
  } else if (exchanging()) {
    compute_exchanging();
  } else if (layers > 1) {
    const int64_t limit = impl->sizer ? impl->sizer->limit() : 0;
    evaluate_compact_chunks();
    if (impl->sizer) report_sizing(limit, list->inum);
  } else {
    const int64_t limit = impl->sizer ? impl->sizer->limit() : 0;
    evaluate_centres(list->ilist, 0, list->inum);
    if (impl->sizer) report_sizing(limit, list->inum);
  }
  end_deviation();
  end_compute();
}

// Message-passing models with a halo of layers x cutoff: each chunk brings its own (L-1)-hop halo
// of complete neighbourhoods; compact chunks keep the halo, which is evaluated again by every
// chunk that needs it, small. Sized by the free memory, the atoms after the sizer's first
// measured call are split anew by its measure (before it, chunks take the sizer's first size).
void PairMLIP::evaluate_compact_chunks()
{
  Impl &s = *impl;
  const double *const *x = atom->x;
  const auto position = [x](int i) { return x[i]; };
  const auto split_from = [&](int first) {
    const auto t0 = Clock::now();
    const int rest = list->inum - first;
    const int chunk = s.sizer ? static_cast<int>(s.sizer->chunk(rest, available_memory())) : options.chunk;
    std::vector<int> atoms(s.order.begin() + first, s.order.end()), ends;
    mlip::split_compact(atoms, chunk, position, ends);
    std::copy(atoms.begin(), atoms.end(), s.order.begin() + first);
    for (const int end : ends) s.chunk_end.push_back(first + end);
    add_time(GRAPH, seconds_since(t0));
  };
  s.order.assign(list->ilist, list->ilist + list->inum);
  s.chunk_end.clear();
  split_from(0);
  for (std::size_t c = 0; c < s.chunk_end.size(); c++) {
    const bool measured = !s.sizer || s.sizer->seen();
    evaluate_centres(s.order.data(), c == 0 ? 0 : s.chunk_end[c - 1], s.chunk_end[c]);
    if (!measured && s.sizer->seen() && c + 1 < s.chunk_end.size()) {
      s.chunk_end.resize(c + 1);
      split_from(s.chunk_end[c]);
    }
  }
}

// The centres atoms[first, last) in calls of at most 'chunk' atoms, of equal size (1152 atoms in
// chunks of at most 1024: two of 576, not 1024 and 128), so that one call's memory is bounded and its
// working set stays in cache; on a GPU without 'chunk', in calls sized by the free memory, a call
// that still runs out of memory split in two and tried again (mlip/model/device_memory.h).
void PairMLIP::evaluate_centres(const int *atoms, int first, int last)
{
  Impl &s = *impl;
  if (s.sizer) {
    sized_calls(error, "model call", [&] {
      mlip::evaluate_within_memory(
          first, last, *s.sizer, [this] { return available_memory(); },
          [&](int64_t a, int64_t b) { evaluate_chunk(atoms + a, atoms + b); }, list->inum);
    });
    return;
  }
  const int size = int(mlip::equal_chunk(last - first, options.chunk));
  for (int a = first; a < last; a += size) evaluate_chunk(atoms + a, atoms + std::min(last, a + size));
}

// The bytes a call on the GPU may take now: this rank's share of the GPU's free memory.
int64_t PairMLIP::available_memory() const
{
  const auto m = mlip::device_memory(impl->model->device());
  return m ? m->available() / impl->gpu_sharing : std::numeric_limits<int64_t>::max() / 2;
}

// Says (rank 0) what the model's calls take once that is known, and again after a call ran out of
// memory (`limit_before`: the sizer's limit before this compute()); `per_call`: the local atoms a
// call took where the caller chose them (the recorded step's chunks), else what the sizer says.
void PairMLIP::report_sizing(int64_t limit_before, int64_t centres, int64_t per_call)
{
  Impl &s = *impl;
  bool &reported = s.sizing_reported[s.committee_sizing() ? 1 : 0];
  const bool first_seen = s.sizer->seen() && !reported;
  if (comm->me != 0 || (!first_seen && s.sizer->limit() == limit_before)) return;
  reported = s.sizer->seen();
  const int64_t available = available_memory();
  const std::string measured = s.sizer->seen() ? fmt::format(" take {:.1f} KiB per centre atom ({:.0f} bytes per edge);",
                                                              s.sizer->bytes_per_centre() / 1024.0, s.sizer->bytes_per_edge())
                                               : ":";
  utils::logmesg(lmp, "pair_style mlip: model calls on the GPU{}{} {} of {} local atoms per call in {:.2f} GiB available{}\n",
                 s.committee_sizing() ? " of all the committee's models (steps reporting its deviation)" : "", measured,
                 per_call > 0 ? per_call : s.sizer->chunk(centres, available), centres,
                 static_cast<double>(available) / (1 << 30),
                 s.sizer->limit() > 0 ? fmt::format(" (at most {} after running out of memory)", s.sizer->limit()) : "");
}

// The centres [first, last) through the model, and through the committee's other models on a
// step that reports their deviation (each on its own graph where its cutoff or species differ).
// The committee's outputs are added once every model has run: a call that runs out of GPU memory in
// any of them has added nothing, and is split and tried again (evaluate_centres).
void PairMLIP::evaluate_chunk(const int *first, const int *last)
{
  Impl &s = *impl;
  const torch::Device device = s.model->device();
  std::optional<mlip::DeviceMemory> before;   // under the sizer, on the calls it measures: the whole call's peak
  if (s.measure_call()) {
    // A sizer's first measure is of a recording: a replay allocates next to nothing (as when the
    // other sizer's calls, a committee's, recorded a capacity this call fits in)
    if (s.capture && !s.sizer->seen()) s.capture->forget();
    mlip::reset_peak_memory(device);
    before = mlip::device_memory(device);
  }
  build_graph(first, last, 0);
  const int64_t centres = s.graph.n_centers, edges = s.graph.n_edges;
  if (deviation_step())
    evaluate_committee(first, last);
  else
    add_graph_outputs(0, evaluate_graph(0), s.graph.node_atom);
  if (before)
    if (const auto after = mlip::device_memory(device)) s.sizer->observe(centres, edges, after->peak - before->allocated);
}

// evaluate_chunk on a step that reports the deviation: every model on the centres (each on its
// own graph where its cutoff or species differ), then every model's outputs added.
void PairMLIP::evaluate_committee(const int *first, const int *last)
{
  std::vector<MlipGraphOutputs> outputs;
  std::vector<std::vector<int>> node_atoms{impl->graph.node_atom};   // each graph's, as the next replaces it
  std::vector<std::size_t> graph_of;
  for (int m = 0; m < committee_size(); m++) {
    if (m > 0 && !same_graph(m, impl->graph_member)) {
      build_graph(first, last, m);
      node_atoms.push_back(impl->graph.node_atom);
    }
    graph_of.push_back(node_atoms.size() - 1);
    outputs.push_back(evaluate_graph(m));
  }
  for (int m = 0; m < committee_size(); m++) add_graph_outputs(m, outputs[m], node_atoms[graph_of[m]]);
}

/* ----------------------------------------------------------------------
   begin_compute / end_compute: what every compute() does first and last (mlip and mlip/kk)
------------------------------------------------------------------------- */

void PairMLIP::begin_compute(int eflag, int vflag, bool alloc)
{
  ev_init(eflag, vflag, alloc ? 1 : 0);    // mlip/kk allocates its per-atom arrays as views
  // Timers cover the steps of a run, as LAMMPS's loop time does (the setup call, which also
  // pays for TorchScript's first-call optimisation, is reported alone only after a `run 0`).
  impl->timers.begin_compute(update->setupflag != 0, update->firststep, update->laststep);
  start_profile();
}

void PairTimers::begin_compute(bool setup, bigint first_step, bigint last_step)
{
  if (setup != in_setup_ || first_step != run_first_ || last_step != run_last_) {
    seconds_[graph] = seconds_[model] = seconds_[forces] = 0.0;
    calls_ = 0;
  }
  in_setup_ = setup;
  run_first_ = first_step;
  run_last_ = last_step;
}

void PairMLIP::end_compute()
{
  impl->timers.end_compute();
  if (impl->profile && ++impl->profiled_calls == Impl::kMaxProfiledCalls) report_profile();
  if (options.timing && update->whichflag == 1 && update->ntimestep == update->laststep) report_timing();
}

void PairMLIP::add_time(Timer which, double seconds)
{
  impl->timers.add(which == GRAPH ? PairTimers::graph : which == MODEL ? PairTimers::model : PairTimers::forces, seconds);
}

/* ----------------------------------------------------------------------
   forward_comm / reverse_comm: one LAMMPS communication of a job's per-atom values, with LAMMPS's
   pack/unpack callbacks passed to that job (the ghost exchange or the committee) while it lasts
------------------------------------------------------------------------- */

void PairMLIP::forward_comm(PairCommJob &job)
{
  communicating = &job;
  forward_comm_of(comm, this, 0);
  communicating = nullptr;
}

void PairMLIP::reverse_comm(PairCommJob &job)
{
  communicating = &job;
  reverse_comm_of(comm, this, 0);
  communicating = nullptr;
}

PairCommJob &PairMLIP::communicating_job()
{
  if (!communicating) error->one(FLERR, "pair_style mlip: a communication that none of its jobs asked for");
  return *communicating;
}

int PairMLIP::pack_forward_comm(int n, int *list, double *buf, int /*pbc_flag*/, int * /*pbc*/)
{
  return communicating_job().pack_forward(n, list, buf);
}

void PairMLIP::unpack_forward_comm(int n, int first, double *buf)
{
  communicating_job().unpack_forward(n, first, buf);
}

int PairMLIP::pack_reverse_comm(int n, int first, double *buf)
{
  return communicating_job().pack_reverse(n, first, buf);
}

void PairMLIP::unpack_reverse_comm(int n, int *list, double *buf)
{
  communicating_job().unpack_reverse(n, list, buf);
}

std::string PairMLIP::model_device(const std::string &asked, std::string &note)
{
  const torch::Device d =
      mlip::choose_device(asked.empty() ? "cpu" : asked, node_local_rank(world), "pair_style mlip", &note);
  return d.str();
}

mlip::Model &PairMLIP::model()
{
  if (!impl->model) error->all(FLERR, "pair_style mlip: no model loaded");
  return *impl->model;
}

/* ----------------------------------------------------------------------
   build_graph: the local atoms [first, last) as centres with their neighbours; for a
   message-passing model with L layers, also atoms within L-1 hops (local, or ghosts within
   (L-1)*cutoff of a local atom, so inside the ghost shell with complete neighbour lists) with
   all their edges. Energies come for the centres only.
------------------------------------------------------------------------- */

void PairMLIP::build_graph(const int *first, const int *last, int member, bool one_hop)
{
  Impl &s = *impl;
  const auto t0 = Clock::now();
  const double *const *x = atom->x;
  const int *type = atom->type;
  const double to_A = 1.0 / distance_unit;    // the graph is in A, as the model
  const Member m = this->member(member);
  const int *species = m.type_species->data();
  s.graph.build(
      first, last, atom->nlocal + atom->nghost, m.cutoff, [&](int i) { return species[type[i]]; },
      [&](int i, auto &&visit) {
        const int *jlist = list->firstneigh[i];
        for (int jj = 0; jj < list->numneigh[i]; jj++) {
          const int j = jlist[jj] & NEIGHMASK;
          visit(j, (x[j][0] - x[i][0]) * to_A, (x[j][1] - x[i][1]) * to_A, (x[j][2] - x[i][2]) * to_A);
        }
      },
      one_hop ? 1 : std::max(m.layers, 1));
  s.graph_member = member;
  add_time(GRAPH, seconds_since(t0));
}

/* ----------------------------------------------------------------------
   evaluate_graph: model call on impl->graph, then energies, forces and virials in LAMMPS's units;
   add_graph_outputs: member 0 (the model that drives the dynamics) adds them to LAMMPS's, every
   member to the deviation's sums
------------------------------------------------------------------------- */

MlipGraphOutputs PairMLIP::evaluate_graph(int member)
{
  Impl &s = *impl;
  const mlip::ChunkGraph &g = s.graph;
  if (g.n_centers == 0) return {};

  check_distances();
  auto t0 = Clock::now();
  const mlip::GraphView view = mlip::graph_view(s.graph);
  mlip::Model &m = *this->member(member).model;
  mlip::ModelOutput out;
  const bool sized = s.sizer != nullptr;   // out of memory: split and retried (evaluate_centres)
  guarded(
      error, false, member == 0 ? std::string("model evaluation failed") : "committee model '" + impl->committee.member(member).file + "' failed",
      [&] { out = member == 0 && s.capture ? s.capture->evaluate(view) : mlip::evaluate_graph(m, view); }, sized);
  add_time(MODEL, seconds_since(t0));
  t0 = Clock::now();
  mlip::EdgeForceRequest request;
  request.virial = vflag_global != 0 || deviation_step();
  request.node_virial = member == 0 && (vflag_atom || cvflag_atom);
  mlip::EdgeForces ef;
  guarded(
      error, false, "forces", [&] { ef = mlip::edge_forces(view, out.edge_grad, request); }, sized);
  to_lammps_units(out, ef);
  out.edge_grad = torch::Tensor();   // not added: its memory free while the committee's others run
  add_time(FORCES, seconds_since(t0));
  return {std::move(out), std::move(ef), g.n_centers};
}

void PairMLIP::add_graph_outputs(int member, const MlipGraphOutputs &o, const std::vector<int> &node_atom)
{
  if (o.n_centers == 0) return;
  const auto t0 = Clock::now();
  const double *energy = o.out.atom_energy.data_ptr<double>();
  if (member == 0) add_outputs(energy, o.forces, node_atom.data(), o.n_centers);
  if (deviation_step())
    add_to_deviation(member, node_atom.data(), o.n_centers, static_cast<int64_t>(node_atom.size()), energy, o.forces);
  add_time(FORCES, seconds_since(t0));
}

/* ----------------------------------------------------------------------
   add_outputs: one graph's energies (n_centers), node forces (n_nodes x 3) and virials (row-major
   3x3; per node: edge i->j's to j) to LAMMPS's atoms; forces on ghost atoms are reverse-communicated
------------------------------------------------------------------------- */

void PairMLIP::add_outputs(const double *energy, const mlip::EdgeForces &ef, const int *node_atom, int64_t n_centers)
{
  const int64_t n_nodes = ef.forces.size(0);
  if (eflag_global)
    for (int64_t c = 0; c < n_centers; c++) eng_vdwl += energy[c];
  if (eflag_atom)
    for (int64_t c = 0; c < n_centers; c++) eatom[node_atom[c]] += energy[c];
  double *const *f = atom->f;
  const double *node_force = ef.forces.data_ptr<double>();
  for (int64_t n = 0; n < n_nodes; n++)
    for (int k = 0; k < 3; k++) f[node_atom[n]][k] += node_force[3 * n + k];
  using mlip_outputs::row_major_index;
  if (vflag_global) {
    const double *w = ef.virial.data_ptr<double>();
    for (int k = 0; k < 6; k++) virial[k] += w[row_major_index(k)];
  }
  if (!vflag_atom && !cvflag_atom) return;
  const double *node_virial = ef.node_virial.data_ptr<double>();
  for (int64_t n = 0; n < n_nodes; n++) {
    const double *w = node_virial + 9 * n;
    const int a = node_atom[n];
    if (vflag_atom)
      for (int k = 0; k < 6; k++) vatom[a][k] += w[row_major_index(k)];
    if (cvflag_atom)
      for (int k = 0; k < 9; k++) cvatom[a][k] += w[row_major_index(k)];
  }
}

/* ----------------------------------------------------------------------
   check_distances: two atoms closer than min_distance (0.1 A) mean a broken simulation (atoms
   flown into each other, a wrong data file): stop with both atom IDs rather than evaluate a
   model far outside anything it was trained on
------------------------------------------------------------------------- */

void PairMLIP::check_distances()
{
  const mlip::ChunkGraph &g = impl->graph;
  const double *v = g.edge_vectors.data();
  for (int64_t e = 0; e < g.n_edges; e++) {
    const double r2 = v[3 * e] * v[3 * e] + v[3 * e + 1] * v[3 * e + 1] + v[3 * e + 2] * v[3 * e + 2];
    if (r2 < min_distance * min_distance)
      close_atoms_error(g.node_atom[g.edge_index[e]], g.node_atom[g.edge_index[g.n_edges + e]], std::sqrt(r2));
  }
}

void PairMLIP::close_atoms_error(int i, int j, double r)
{
  error->one(FLERR, fmt::format("pair_style mlip: atoms {} and {} are {:.4g} A apart (less than {} A) at step {}",
                                atom->tag[i], atom->tag[j], r, min_distance, update->ntimestep));
}

/* ----------------------------------------------------------------------
   init_cuda_graph: 'cuda_graph yes' needs the model on a GPU, a model
   with static shapes (forward_grouped) and the plain (not Kokkos) style
------------------------------------------------------------------------- */

void PairMLIP::init_cuda_graph(bool one_call)
{
  impl->capture.reset();
  impl->step.reset();
  if (!options.cuda_graph) return;
  const bool record = !options.cuda_graph_eager;
  if (kokkosable) error->all(FLERR, "pair_style mlip: cuda_graph yes is for pair_style mlip, not its Kokkos variant");
  if (record && !one_call)   // this rank's device: one rank may have fallen back to the CPU
    error->one(FLERR, "pair_style mlip: cuda_graph yes needs the model on a GPU ('device cuda')");
  if (exchanging()) error->all(FLERR, "pair_style mlip: cuda_graph yes cannot record the ghost exchange");
  if (options.device_graph) {
    guarded(error, true, "cuda_graph with graph device",
            [&] { impl->step = std::make_unique<mlip::DeviceStep>(*impl->model, cutoff, record, min_distance); });
  } else {
    guarded(error, true, "cuda_graph yes",
            [&] { impl->capture = std::make_unique<mlip::GraphCapture>(*impl->model, record); });
  }
  // 'timing kernels': a profile running when the system outgrows a recording stops there (a
  // capture is not profiled) and reports the calls before it (the one it stops in is not counted;
  // what that one did so far is in the table); stopped in its first call, it reports nothing.
  const auto stop_profile = [this] {
    if (!impl->profile) return;
    utils::logmesg(lmp, "pair_style mlip kernels: stopped before {} is recorded anew (a recording is not profiled)\n",
                   options.device_graph ? "the step" : "the model call");
    if (impl->profiled_calls > 0) return report_profile();
    impl->profile.reset();
    impl->profile_reported_at = update->laststep;
  };
  if (impl->step) impl->step->before_recording(stop_profile);
  if (impl->capture) impl->capture->before_recording(stop_profile);
  if (comm->me == 0)
    utils::logmesg(lmp, "pair_style mlip: {} {} on sizes padded by 10% (and to multiples of 32), {} when the system "
                        "outgrows them{}\n",
                   options.device_graph ? "the whole step (cell list, edges, model, forces)" : "the model call",
                   record ? "is recorded as a CUDA graph" : "runs eagerly ('cuda_graph eager')",
                   record ? "recorded anew" : "grown",
                   committee_size() == 1 ? "" : "; the committee's other models run without");
}

/* ----------------------------------------------------------------------
   report_timing: where pair time went in this run, averaged over ranks (all ranks call it)
------------------------------------------------------------------------- */

void PairMLIP::report_timing()
{
  const PairTimers &t = impl->timers;
  double local[4] = {t.seconds(PairTimers::graph), t.seconds(PairTimers::model), t.seconds(PairTimers::forces),
                     peak_rss_mib()},
         sum[4], max[4];
  MPI_Allreduce(local, sum, 4, MPI_DOUBLE, MPI_SUM, world);
  MPI_Allreduce(local, max, 4, MPI_DOUBLE, MPI_MAX, world);
  if (comm->me != 0) return;
  const double nprocs = comm->nprocs;
  // Per atom-step of wall time: ranks run side by side, so the rank average over all atoms.
  const double scale = 1e6 / (nprocs * static_cast<double>(t.calls()) * std::max<double>(1.0, atom->natoms));
  utils::logmesg(lmp,
                 "pair_style mlip timing: {} force calls, {} atoms, {} ranks; us/atom-step (rank average): "
                 "graph {:.4g}, model {:.4g}, forces {:.4g}; peak RSS {:.1f} MiB max, {:.1f} MiB sum over ranks\n",
                 t.calls(), atom->natoms, comm->nprocs, sum[0] * scale, sum[1] * scale, sum[2] * scale, max[3], sum[3]);
  if (impl->capture)
    utils::logmesg(lmp, "pair_style mlip timing: CUDA graph recorded {} time(s) on rank 0 so far\n",
                   impl->capture->recordings());
  if (impl->step)
    utils::logmesg(lmp, "pair_style mlip timing: the whole step recorded {} time(s) on rank 0 so far, {} step(s) "
                        "evaluated again after their edges outgrew the capacity, its model calls in {} chunk(s); "
                        "graph is the host's own part (staging the inputs, unpacking the results), model the rest of "
                        "the step (its cell list, edges, model and forces on the device, the launches, copies and "
                        "waits)\n",
                   impl->step->recordings(), impl->step->repeats(), impl->step->capacity().chunks);
  for (int all_models = 0; all_models < 2; all_models++)
    if (const mlip::ChunkSizer *sizer = impl->sizers[all_models].get(); sizer && sizer->seen())
      utils::logmesg(lmp, "pair_style mlip timing: GPU memory of a model call{} on rank 0: {:.1f} KiB per centre atom, "
                          "{:.0f} bytes per edge (the most seen)\n",
                     all_models ? " of all the committee's models" : "", sizer->bytes_per_centre() / 1024.0,
                     sizer->bytes_per_edge());
  report_profile();
}

/* ----------------------------------------------------------------------
   'timing kernels': LibTorch's profiler on rank 0 from a run's second force call (the first pays
   for TorchScript's optimisation) to its timing report, or over 50 calls in a longer run
------------------------------------------------------------------------- */

void PairMLIP::start_profile()
{
  Impl &s = *impl;
  if (!options.timing_kernels || comm->me != 0 || s.profile || update->setupflag || update->whichflag != 1 ||
      s.timers.calls() != 1)
    return;
  try {    // a profile that cannot start stops nothing but itself
    s.profile = std::make_unique<mlip::KernelProfile>(s.model ? s.model->device() : torch::Device(torch::kCPU));
  } catch (const std::exception &e) {
    error->warning(FLERR, std::string("pair_style mlip: timing kernels: no profile: ") + e.what());
  }
  s.profiled_calls = 0;
}

void PairMLIP::report_profile()
{
  Impl &s = *impl;
  if (!options.timing_kernels) return;
  if (!s.profile && s.profile_reported_at == update->laststep) return;   // reported at the cap
  if (!s.profile) {
    utils::logmesg(lmp, "pair_style mlip kernels: nothing profiled (a run's first step is not: run 2 steps or more)\n");
    return;
  }
  mlip::ProfileSummary summary;
  try {
    summary = s.profile->stop();
  } catch (const std::exception &e) {
    s.profile.reset();
    error->warning(FLERR, std::string("pair_style mlip: timing kernels: the profile failed: ") + e.what());
    return;
  }
  s.profile.reset();
  s.profile_reported_at = update->laststep;
  utils::logmesg(lmp, "pair_style mlip kernels: {} force calls on rank 0 under LibTorch's profiler (slower than "
                      "without it); per force call:\n{}",
                 s.profiled_calls, mlip::format_profile(summary, "pair_style mlip kernels: ", s.profiled_calls, "call"));
}
