// The pair style inside mlipplugin_impl.so, registered by mlipplugin.so once that has checked the
// host's LAMMPS version (mlipplugin.cpp).
#include "lammpsplugin.h"
#include "version.h"

#include "pair_mlip.h"

using namespace LAMMPS_NS;

static Pair *mlip_creator(LAMMPS *lmp)
{
  return new PairMLIP(lmp);
}

extern "C" void mlip_register_pair_style(void *lmp, void *handle, void *regfunc)
{
  lammpsplugin_t plugin;
  auto register_plugin = (lammpsplugin_regfunc) regfunc;
  plugin.version = LAMMPS_VERSION;
  plugin.style = "pair";
  plugin.name = "mlip";
  plugin.info = "mlip machine-learning interatomic potentials (TorchScript models)";
  plugin.author = "the mlip developers";
  plugin.creator.v1 = (lammpsplugin_factory1 *) &mlip_creator;
  plugin.handle = handle;
  (*register_plugin)(&plugin, lmp);
}
