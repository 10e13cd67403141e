/* ----------------------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.

   Model deviation of a committee, for active learning (DeePMD-kit's convention):
     pair_style mlip m0.pt m1.pt m2.pt [out_freq N] [out_file FILE] [relative EPS]
   m0.pt drives the dynamics. Every N steps (default 100) all models are evaluated on the same
   atoms and FILE (default model_devi.out) gets a line: the step, the max, min and mean over
   the 9 components of the virial deviation (per atom), the max, min and mean over atoms of the
   force deviation, and the energy deviation per atom (definitions: mlip/deviation.h), in
   LAMMPS's units. The per-atom force deviation is the atom property d_mlip_devi_f (for dump
   custom, compute reduce, variables), and 'compute ID all pair mlip' gives the line's 7
   values, so that 'fix halt' can stop a run that leaves the models' domain. On other steps the
   other models are not evaluated. Models may differ in cutoff and architecture; each gets its
   own graph where its cutoff or species differ from the graph at hand.
------------------------------------------------------------------------- */

#include "pair_mlip.h"
#include "pair_mlip_impl.h"

#include "atom.h"
#include "comm.h"
#include "update.h"

#include "mlip/deviation.h"

#include <algorithm>
#include <cmath>

using namespace LAMMPS_NS;

namespace {

constexpr int n_columns = 7;    // after the step: virial max, min, mean; force max, min, mean; energy
const char *const per_atom_name = "mlip_devi_f";

}    // namespace

/* ----------------------------------------------------------------------
   load_committee: the models after the first (settings())
------------------------------------------------------------------------- */

void PairMLIP::load_committee(const std::vector<std::string> &files, const std::string &device)
{
  Impl &s = *impl;
  s.members.clear();
  if (s.out) fclose(s.out);    // a new pair_style command starts a new file
  s.out = nullptr;
  s.last_report = -1;
  for (std::size_t k = 1; k < files.size(); k++) {
    MlipMember m;
    m.file = files[k];
    guarded(error, true, "cannot load model", [&] {
      m.model = std::make_unique<mlip::Model>(mlip::Model::load(m.file, torch::Device(device)));
    });
    m.cutoff = m.model->info().cutoff;
    m.layers = m.model->info().message_passing_layers;
    s.members.push_back(std::move(m));
  }
  const int models = committee_size();
  comm_reverse = models > 1 ? 3 * models : 0;
  nextra = models > 1 ? n_columns : 0;
  s.stats.assign(n_columns, 0.0);
  pvector = nextra > 0 ? s.stats.data() : nullptr;
  init_deviation();    // now: dump custom looks d_mlip_devi_f up when it is defined
  if (models > 1 && comm->me == 0) {
    std::string names;
    for (const auto &f : files) names += (names.empty() ? "'" : ", '") + f + "'";
    utils::logmesg(lmp, "pair_style mlip: committee of {} models ({}); the first drives the dynamics; every {} "
                        "steps all are evaluated and '{}' gets the model deviation (step, virial max min mean, "
                        "force max min mean, energy per atom{}); per-atom force deviation: d_{}\n",
                   models, names, s.out_freq, s.out_file,
                   s.relative > 0 ? fmt::format("; forces relative to |F| + {}", s.relative) : "", per_atom_name);
  }
}

int PairMLIP::committee_size() const
{
  return 1 + static_cast<int>(impl->members.size());
}

PairMLIP::Member PairMLIP::member(int m) const
{
  if (m == 0) return {impl->model.get(), cutoff, layers, &type_species};
  const MlipMember &x = impl->members[m - 1];
  return {x.model.get(), x.cutoff, x.layers, &x.type_species};
}

bool PairMLIP::deviation_step() const
{
  return impl->reporting;
}

// Whether members a and b see the same graph (cutoff, message-passing depth, species).
bool PairMLIP::same_graph(int a, int b) const
{
  const Member x = member(a), y = member(b);
  return x.cutoff == y.cutoff && x.layers == y.layers && *x.type_species == *y.type_species;
}

/* ----------------------------------------------------------------------
   init_deviation: the per-atom property d_mlip_devi_f (settings() and init_style())
------------------------------------------------------------------------- */

void PairMLIP::init_deviation()
{
  if (committee_size() < 2) return;
  int flag = 0, cols = 0;
  if (atom->find_custom(per_atom_name, flag, cols) < 0) atom->add_custom(per_atom_name, 1, 0);
}

/* ----------------------------------------------------------------------
   begin_deviation: whether this step reports; zeroed sums if it does
------------------------------------------------------------------------- */

void PairMLIP::begin_deviation()
{
  Impl &s = *impl;
  s.reporting = s.out_freq > 0 && update->ntimestep % s.out_freq == 0 && update->ntimestep != s.last_report;
  if (!s.reporting) return;
  const int models = committee_size();
  s.nall = atom->nlocal + atom->nghost;
  s.member_forces.assign(static_cast<std::size_t>(models) * s.nall * 3, 0.0);
  s.member_virial.assign(9 * models, 0.0);
  s.member_energy.assign(models, 0.0);
}

/* ----------------------------------------------------------------------
   add_to_deviation: one graph's energies, node forces and virial (LAMMPS units) to the sums of
   committee member `member`
------------------------------------------------------------------------- */

void PairMLIP::add_to_deviation(int member, const int *node_atom, int64_t n_centers, int64_t n_nodes,
                                const double *energy, const mlip::EdgeForces &ef)
{
  Impl &s = *impl;
  double *f = s.member_forces.data() + static_cast<std::size_t>(member) * s.nall * 3;
  const torch::Tensor forces = ef.forces.cpu().contiguous();
  const double *nf = forces.data_ptr<double>();
  for (int64_t n = 0; n < n_nodes; n++)
    for (int d = 0; d < 3; d++) f[3 * node_atom[n] + d] += nf[3 * n + d];
  for (int64_t c = 0; c < n_centers; c++) s.member_energy[member] += energy[c];
  const torch::Tensor w = ef.virial.cpu().contiguous();
  for (int k = 0; k < 9; k++) s.member_virial[9 * member + k] += w.data_ptr<double>()[k];
}

int PairMLIP::pack_reverse_comm(int n, int first, double *buf)
{
  const Impl &s = *impl;
  if (s.reverse == Impl::Reverse::features) return pack_feature_rows(n, first, buf);
  const int models = committee_size();
  int m = 0;
  for (int i = first; i < first + n; i++)
    for (int k = 0; k < models; k++)
      for (int d = 0; d < 3; d++) buf[m++] = s.member_forces[(static_cast<std::size_t>(k) * s.nall + i) * 3 + d];
  return m;
}

void PairMLIP::unpack_reverse_comm(int n, int *list, double *buf)
{
  Impl &s = *impl;
  if (s.reverse == Impl::Reverse::features) return add_feature_rows(n, list, buf);
  const int models = committee_size();
  int m = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < models; k++)
      for (int d = 0; d < 3; d++) s.member_forces[(static_cast<std::size_t>(k) * s.nall + list[i]) * 3 + d] += buf[m++];
}

/* ----------------------------------------------------------------------
   end_deviation: ghost forces to their owners, per-atom deviations, statistics over all ranks,
   the file's line (rank 0) and compute pair's vector
------------------------------------------------------------------------- */

void PairMLIP::end_deviation()
{
  Impl &s = *impl;
  if (!s.reporting) return;
  s.reporting = false;
  s.last_report = update->ntimestep;
  reverse_comm_of(comm, this, 0);
  const int models = committee_size();
  const int nlocal = atom->nlocal;
  std::vector<double> deviation(nlocal);
  mlip::atom_force_deviation(s.member_forces.data(), models, nlocal, 3 * static_cast<int64_t>(s.nall), s.relative,
                             deviation.data());
  int flag = 0, cols = 0;
  double *per_atom = atom->dvector[atom->find_custom(per_atom_name, flag, cols)];
  mlip::DeviationSummary local;
  for (int i = 0; i < nlocal; i++) {
    const bool handled = type_species[atom->type[i]] >= 0;    // NULL types: no model forces
    per_atom[i] = handled ? deviation[i] : 0.0;
    if (handled) local.add(deviation[i]);
  }
  double max = 0.0, min = 0.0, sums[2] = {local.sum, static_cast<double>(local.count)}, total[2];
  MPI_Allreduce(&local.max, &max, 1, MPI_DOUBLE, MPI_MAX, world);
  MPI_Allreduce(&local.min, &min, 1, MPI_DOUBLE, MPI_MIN, world);
  MPI_Allreduce(sums, total, 2, MPI_DOUBLE, MPI_SUM, world);
  std::vector<double> virial(9 * models), energy(models);
  MPI_Allreduce(s.member_virial.data(), virial.data(), 9 * models, MPI_DOUBLE, MPI_SUM, world);
  MPI_Allreduce(s.member_energy.data(), energy.data(), models, MPI_DOUBLE, MPI_SUM, world);

  double columns[n_columns] = {0.0};
  const double atoms = total[1];
  if (atoms > 0) {
    const mlip::DeviationSummary v = mlip::virial_deviation(virial.data(), models, atoms);
    const double c[n_columns] = {v.max, v.min, v.mean(), max, min, total[0] / atoms,
                                 mlip::energy_deviation(energy.data(), models, atoms)};
    std::copy(c, c + n_columns, columns);
  }
  // compute pair sums pvector over ranks: the values on rank 0, zeros elsewhere.
  for (int k = 0; k < n_columns; k++) s.stats[k] = comm->me == 0 ? columns[k] : 0.0;
  if (comm->me == 0) write_deviation(columns);
}

void PairMLIP::write_deviation(const double *columns)
{
  Impl &s = *impl;
  if (!s.out) {
    s.out = fopen(s.out_file.c_str(), "w");
    if (!s.out)
      error->one(FLERR, fmt::format("pair_style mlip: cannot open model deviation file '{}' for writing: {}",
                                    s.out_file, utils::getsyserror()));
    fmt::print(s.out, "#{:>11} {:>18} {:>18} {:>18} {:>18} {:>18} {:>18} {:>18}\n", "step", "max_devi_v",
               "min_devi_v", "avg_devi_v", "max_devi_f", "min_devi_f", "avg_devi_f", "devi_e");
  }
  fmt::print(s.out, "{:>12}", update->ntimestep);
  for (int k = 0; k < n_columns; k++) fmt::print(s.out, " {:>18.10e}", columns[k]);
  fmt::print(s.out, "\n");
  fflush(s.out);
}
