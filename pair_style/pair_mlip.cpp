/* ----------------------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.

   pair_style mlip MODEL [chunk N]
   pair_coeff * * El1 El2 ... (element per LAMMPS type, NULL = not handled by the model)

   The model (common/include/mlip/model.h) returns per-atom energies from the edge vectors of a
   graph; forces are dE/dr_ij from autograd, scattered to both ends of each edge here.
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

#include "mlip/chunk_graph.h"
#include "mlip/error.h"
#include "mlip/model.h"

#include <cmath>
#include <cstring>

using namespace LAMMPS_NS;

// LibTorch state and the chunk graph, whose buffers are reused from step to step.
struct PairMLIP::Impl {
  std::unique_ptr<mlip::Model> model;
  mlip::ChunkGraph graph;
  std::vector<int> centers;
};

namespace {

// Every LibTorch or mlip failure surfaces through here, keeping its message and adding context.
template <typename F> void guarded(Error *error, bool all_ranks, const std::string &what, F &&body)
{
  try {
    body();
  } catch (const mlip::Error &e) {
    const std::string msg = "pair_style mlip: " + what + ": " + e.what();
    all_ranks ? error->all(FLERR, msg) : error->one(FLERR, msg);
  } catch (const c10::Error &e) {
    const std::string msg = "pair_style mlip: " + what + ": " + e.what_without_backtrace();
    all_ranks ? error->all(FLERR, msg) : error->one(FLERR, msg);
  }
}

}    // namespace

/* ---------------------------------------------------------------------- */

PairMLIP::PairMLIP(LAMMPS *lmp) : Pair(lmp), impl(new Impl), chunk_size(4096), cutoff(0.0)
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
}

PairMLIP::~PairMLIP()
{
  if (allocated) {
    memory->destroy(setflag);
    memory->destroy(cutsq);
  }
}

void PairMLIP::allocate()
{
  allocated = 1;
  const int n = atom->ntypes;
  memory->create(setflag, n + 1, n + 1, "pair:setflag");
  memory->create(cutsq, n + 1, n + 1, "pair:cutsq");
  for (int i = 1; i <= n; i++)
    for (int j = i; j <= n; j++) setflag[i][j] = 0;
}

/* ----------------------------------------------------------------------
   settings: pair_style mlip MODEL [chunk N]; loads the model on every rank
------------------------------------------------------------------------- */

void PairMLIP::settings(int narg, char **arg)
{
  if (narg < 1) error->all(FLERR, "Illegal pair_style mlip command: expected 'pair_style mlip MODEL [chunk N]'");
  model_file = arg[0];
  for (int iarg = 1; iarg < narg; iarg += 2) {
    if (iarg + 1 >= narg) error->all(FLERR, fmt::format("pair_style mlip: keyword '{}' needs a value", arg[iarg]));
    if (strcmp(arg[iarg], "chunk") == 0) {
      chunk_size = utils::inumeric(FLERR, arg[iarg + 1], false, lmp);
      if (chunk_size < 1) error->all(FLERR, "pair_style mlip: chunk must be >= 1");
    } else {
      error->all(FLERR, fmt::format("pair_style mlip: unknown keyword '{}' (known: chunk)", arg[iarg]));
    }
  }
  guarded(error, true, "cannot load model", [&] {
    impl->model = std::make_unique<mlip::Model>(mlip::Model::load(model_file));
  });
  const auto &meta = impl->model->metadata();
  cutoff = meta.cutoff;
  if (comm->me == 0)
    utils::logmesg(lmp, "pair_style mlip: {} model '{}', species {}, cutoff {} A, {} message-passing layers, {}\n",
                   meta.architecture, model_file, fmt::join(meta.species, " "), meta.cutoff,
                   meta.message_passing_layers, meta.dtype);
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

  const auto &meta = impl->model->metadata();
  type_species.assign(ntypes + 1, -1);
  for (int t = 1; t <= ntypes; t++) {
    const std::string element = arg[1 + t];
    if (element == "NULL") continue;
    const int s = meta.species_index(element);
    if (s < 0)
      error->all(FLERR, fmt::format("pair_coeff mlip: element '{}' for atom type {} is not in model '{}' (species: {})",
                                    element, t, model_file, fmt::join(meta.species, " ")));
    type_species[t] = s;
  }
  int count = 0;
  for (int i = 1; i <= ntypes; i++)
    for (int j = i; j <= ntypes; j++) {
      setflag[i][j] = (type_species[i] >= 0 && type_species[j] >= 0) ? 1 : 0;
      count += setflag[i][j];
    }
  if (count == 0) error->all(FLERR, "pair_coeff mlip: every atom type is NULL");
}

/* ----------------------------------------------------------------------
   init_style: checks and the neighbour request
------------------------------------------------------------------------- */

void PairMLIP::init_style()
{
  if (!impl->model) error->all(FLERR, "pair_style mlip: no model loaded");
  // The model is in eV and Angstrom; other unit styles are rejected rather than silently wrong.
  if (strcmp(update->unit_style, "metal") != 0)
    error->all(FLERR, fmt::format("pair_style mlip: model '{}' is in eV and Angstrom and needs 'units metal', "
                                  "not 'units {}'", model_file, update->unit_style));
  // Forces land on ghost atoms (the far end of each edge) and must be reverse-communicated.
  if (force->newton_pair == 0) error->all(FLERR, "pair_style mlip requires 'newton on'");
  if (atom->tag_enable == 0) error->all(FLERR, "pair_style mlip requires atom IDs");
  const int layers = impl->model->metadata().message_passing_layers;
  if (layers > 1)
    error->all(FLERR, fmt::format("pair_style mlip: model '{}' has {} message-passing layers; this build evaluates "
                                  "local models (0 or 1 layer) only", model_file, layers));

  // A full list: every centre sees all its neighbours, as the model's descriptors need.
#if MLIP_LAMMPS_NEW_NEIGHBOR_API    // LAMMPS >= 24Mar2022 (see cmake/LammpsVersion.cmake)
  neighbor->add_request(this, NeighConst::REQ_FULL);
#else
  const int irequest = neighbor->request(this, instance_me);
  neighbor->requests[irequest]->half = 0;
  neighbor->requests[irequest]->full = 1;
#endif
}

double PairMLIP::init_one(int, int)
{
  return cutoff;
}

/* ----------------------------------------------------------------------
   compute: local atoms in chunks -> graph -> model -> forces, energies, virials
------------------------------------------------------------------------- */

void PairMLIP::compute(int eflag, int vflag)
{
  ev_init(eflag, vflag);
  // Chunks bound the memory of one model call and keep its working set in cache.
  for (int first = 0; first < list->inum; first += chunk_size)
    evaluate_chunk(first, std::min(list->inum, first + chunk_size));
}

void PairMLIP::evaluate_chunk(int first, int last)
{
  Impl &s = *impl;
  const double *const *x = atom->x;
  double *const *f = atom->f;
  const int *type = atom->type;

  s.centers.assign(list->ilist + first, list->ilist + last);
  s.graph.build(
      s.centers, atom->nlocal + atom->nghost, cutoff, [&](int i) { return type_species[type[i]]; },
      [&](int i, auto &&visit) {
        const int *jlist = list->firstneigh[i];
        for (int jj = 0; jj < list->numneigh[i]; jj++) {
          const int j = jlist[jj] & NEIGHMASK;
          visit(j, x[j][0] - x[i][0], x[j][1] - x[i][1], x[j][2] - x[i][2]);
        }
      });
  const mlip::ChunkGraph &g = s.graph;
  if (g.n_centers == 0) return;

  mlip::ModelOutput out;
  guarded(error, false, "model evaluation failed", [&] { out = mlip::evaluate_chunk(*s.model, s.graph); });
  const double *energy = out.atom_energy.data_ptr<double>();    // (n_centers)
  const double *grad = out.edge_grad.data_ptr<double>();        // (n_edges, 3) dE/dr_ij

  if (eflag_either) {
    for (int64_t c = 0; c < g.n_centers; c++) {
      if (eflag_global) eng_vdwl += energy[c];
      if (eflag_atom) eatom[g.node_atom[c]] += energy[c];
    }
  }
  for (int64_t e = 0; e < g.n_edges; e++) {
    const int i = g.node_atom[g.edge_index[e]];
    const int j = g.node_atom[g.edge_index[g.n_edges + e]];
    const double *gr = grad + 3 * e;
    const double *r = g.edge_vectors.data() + 3 * e;
    // r_ij = x_j - x_i, so dE/dx_j = g and dE/dx_i = -g.
    for (int d = 0; d < 3; d++) {
      f[i][d] += gr[d];
      f[j][d] -= gr[d];
    }
    if (vflag_either) {
      // W = -r (x) g, the edge's share of sum_i x_i . f_i.
      const double v[6] = {-r[0] * gr[0], -r[1] * gr[1], -r[2] * gr[2],
                           -r[0] * gr[1], -r[0] * gr[2], -r[1] * gr[2]};
      if (vflag_global)
        for (int k = 0; k < 6; k++) virial[k] += v[k];
      if (vflag_atom)
        for (int k = 0; k < 6; k++) vatom[j][k] += v[k];
      if (cvflag_atom) {
        const double cv[9] = {v[0], v[1], v[2], v[3], v[4], v[5],
                              -r[1] * gr[0], -r[2] * gr[0], -r[2] * gr[1]};
        for (int k = 0; k < 9; k++) cvatom[j][k] += cv[k];
      }
    }
  }
}
