/* ----------------------------------------------------------------------
   mlip: machine-learning interatomic potentials for LAMMPS.

   Model deviation of a committee, for active learning (DeePMD-kit's convention):
     pair_style mlip m0.pt m1.pt m2.pt [out_freq N] [out_file FILE] [relative EPS]
   m0.pt drives the dynamics. Every N steps (default 100) all models are evaluated on the same
   atoms and FILE (default model_devi.out) gets a line: the step, the max, min and mean over
   the 9 components of the virial deviation (per atom), the max, min and mean over atoms of the
   force deviation, and the energy deviation per atom (definitions: mlip/model/deviation.h), in
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

#include "mlip/model/deviation.h"
#include "utils.h"

#include <algorithm>
#include <cmath>

using namespace LAMMPS_NS;

namespace {

const char *const per_atom_name = "mlip_devi_f";

}    // namespace

/* ----------------------------------------------------------------------
   Committee: the sums and the file of the model deviation
------------------------------------------------------------------------- */

void Committee::reset(const mlip_pair::Options &options)
{
  members_.clear();
  close();    // a new pair_style command starts a new file
  last_report_ = -1;
  reporting_ = false;
  std::fill(stats_.begin(), stats_.end(), 0.0);    // compute pair's vector until the first report
  out_freq_ = options.out_freq;
  out_file_ = options.out_file;
  relative_ = options.relative;
}

void Committee::close()
{
  if (out_) fclose(out_);
  out_ = nullptr;
}

bool Committee::begin_step(bigint step, int nall)
{
  reporting_ = out_freq_ > 0 && step % out_freq_ == 0 && step != last_report_;
  if (!reporting_) return false;
  nall_ = nall;
  forces_.assign(static_cast<std::size_t>(size()) * nall * 3, 0.0);
  virial_.assign(9 * size(), 0.0);
  energy_.assign(size(), 0.0);
  return true;
}

void Committee::add_outputs(int k, const int *node_atom, int64_t n_centers, int64_t n_nodes, const double *energy,
                            const mlip::EdgeForces &ef)
{
  double *f = forces_.data() + static_cast<std::size_t>(k) * nall_ * 3;
  const torch::Tensor forces = ef.forces.cpu().contiguous();
  const double *nf = forces.data_ptr<double>();
  for (int64_t n = 0; n < n_nodes; n++)
    for (int d = 0; d < 3; d++) f[3 * node_atom[n] + d] += nf[3 * n + d];
  for (int64_t c = 0; c < n_centers; c++) energy_[k] += energy[c];
  const torch::Tensor w = ef.virial.cpu().contiguous();
  for (int j = 0; j < 9; j++) virial_[9 * k + j] += w.data_ptr<double>()[j];
}

int Committee::pack_reverse(int n, int first, double *buf) const
{
  int m = 0;
  for (int i = first; i < first + n; i++)
    for (int k = 0; k < size(); k++)
      for (int d = 0; d < 3; d++) buf[m++] = forces_[(static_cast<std::size_t>(k) * nall_ + i) * 3 + d];
  return m;
}

void Committee::unpack_reverse(int n, const int *list, const double *buf)
{
  int m = 0;
  for (int i = 0; i < n; i++)
    for (int k = 0; k < size(); k++)
      for (int d = 0; d < 3; d++) forces_[(static_cast<std::size_t>(k) * nall_ + list[i]) * 3 + d] += buf[m++];
}

std::vector<double> Committee::atom_deviation(int nlocal) const
{
  std::vector<double> deviation(nlocal);
  mlip::atom_force_deviation(forces_.data(), size(), nlocal, 3 * static_cast<int64_t>(nall_), relative_,
                             deviation.data());
  return deviation;
}

void Committee::end_step(bigint step, const double *columns, bool rank0)
{
  reporting_ = false;
  last_report_ = step;
  // compute pair sums pvector over ranks: the values on rank 0, zeros elsewhere.
  for (int k = 0; k < n_columns; k++) stats_[k] = rank0 ? columns[k] : 0.0;
  if (!rank0) return;
  if (!out_) {
    out_ = fopen(out_file_.c_str(), "w");
    if (!out_)
      throw mlip::Error(fmt::format("cannot open model deviation file '{}' for writing: {}", out_file_,
                                    utils::getsyserror()));
    fmt::print(out_, "#{:>11} {:>18} {:>18} {:>18} {:>18} {:>18} {:>18} {:>18}\n", "step", "max_devi_v",
               "min_devi_v", "avg_devi_v", "max_devi_f", "min_devi_f", "avg_devi_f", "devi_e");
  }
  fmt::print(out_, "{:>12}", step);
  for (int k = 0; k < n_columns; k++) fmt::print(out_, " {:>18.10e}", columns[k]);
  fmt::print(out_, "\n");
  fflush(out_);
}

/* ----------------------------------------------------------------------
   load_committee: the models after the first (settings())
------------------------------------------------------------------------- */

void PairMLIP::load_committee(const std::vector<std::string> &files, const std::string &device)
{
  Committee &c = impl->committee;
  c.reset(options);
  for (std::size_t k = 1; k < files.size(); k++) {
    MlipMember m;
    m.file = files[k];
    guarded(error, true, "cannot load model", [&] {
      m.model = std::make_unique<mlip::Model>(mlip::Model::load(m.file, torch::Device(device)));
      if (!options.head.empty()) m.model->select_head(options.head);
    });
    m.cutoff = m.model->info().cutoff;
    m.layers = m.model->info().message_passing_layers;
    c.add(std::move(m));
  }
  const int models = c.size();
  nextra = models > 1 ? Committee::n_columns : 0;
  pvector = nextra > 0 ? c.stats() : nullptr;
  init_deviation();    // now: dump custom looks d_mlip_devi_f up when it is defined
  if (models > 1 && comm->me == 0) {
    std::string names;
    for (const auto &f : files) names += (names.empty() ? "'" : ", '") + f + "'";
    utils::logmesg(lmp, "pair_style mlip: committee of {} models ({}); the first drives the dynamics; every {} "
                        "steps all are evaluated and '{}' gets the model deviation (step, virial max min mean, "
                        "force max min mean, energy per atom{}); per-atom force deviation: d_{}\n",
                   models, names, c.out_freq(), c.out_file(),
                   c.relative() > 0 ? fmt::format("; forces relative to |F| + {}", c.relative()) : "", per_atom_name);
  }
}

int PairMLIP::committee_size() const
{
  return impl->committee.size();
}

PairMLIP::Member PairMLIP::member(int m) const
{
  if (m == 0) return {impl->model.get(), cutoff, layers, &type_species};
  const MlipMember &x = impl->committee.member(m);
  return {x.model.get(), x.cutoff, x.layers, &x.type_species};
}

bool PairMLIP::deviation_step() const
{
  return impl->committee.reporting();
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

void PairMLIP::begin_deviation()
{
  impl->committee.begin_step(update->ntimestep, atom->nlocal + atom->nghost);
}

void PairMLIP::add_to_deviation(int member, const int *node_atom, int64_t n_centers, int64_t n_nodes,
                                const double *energy, const mlip::EdgeForces &ef)
{
  impl->committee.add_outputs(member, node_atom, n_centers, n_nodes, energy, ef);
}

/* ----------------------------------------------------------------------
   end_deviation: ghost forces to their owners, per-atom deviations, statistics over all ranks,
   the file's line (rank 0) and compute pair's vector
------------------------------------------------------------------------- */

void PairMLIP::end_deviation()
{
  Committee &c = impl->committee;
  if (!c.reporting()) return;
  reverse_comm(c);
  const int models = c.size();
  const int nlocal = atom->nlocal;
  const std::vector<double> deviation = c.atom_deviation(nlocal);
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
  MPI_Allreduce(c.virials().data(), virial.data(), 9 * models, MPI_DOUBLE, MPI_SUM, world);
  MPI_Allreduce(c.energies().data(), energy.data(), models, MPI_DOUBLE, MPI_SUM, world);

  double columns[Committee::n_columns] = {0.0};
  const double atoms = total[1];
  if (atoms > 0) {
    const mlip::DeviationSummary v = mlip::virial_deviation(virial.data(), models, atoms);
    const double values[Committee::n_columns] = {v.max, v.min, v.mean(), max, min, total[0] / atoms,
                                                 mlip::energy_deviation(energy.data(), models, atoms)};
    std::copy(values, values + Committee::n_columns, columns);
  }
  guarded(error, false, "model deviation", [&] { c.end_step(update->ntimestep, columns, comm->me == 0); });
}
