// Registers pair_style mlip as a LAMMPS plugin: `plugin load mlipplugin.so` in a LAMMPS binary
// built with the PLUGIN package, no MLIP package needed. Same sources as the package.
#include "lammpsplugin.h"
#include "version.h"

#include "pair_mlip.h"

using namespace LAMMPS_NS;

static Pair *mlip_creator(LAMMPS *lmp)
{
  return new PairMLIP(lmp);
}

extern "C" void lammpsplugin_init(void *lmp, void *handle, void *regfunc)
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
