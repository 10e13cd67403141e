// Registers pair_style mlip as a LAMMPS plugin: `plugin load mlipplugin.so` in a LAMMPS binary
// built with the PLUGIN package, no MLIP package needed. Same sources as the package.
//
// A plugin is compiled against one LAMMPS's headers; class layouts change between releases, so
// one loaded into another LAMMPS would fail later in confusing ways (or crash). It refuses at load
// instead, naming both versions, and registers nothing (LAMMPS itself only warns). The host's
// version comes from the C library interface, whose layout does not change.
#include "library.h"
#include "lammpsplugin.h"
#include "version.h"

#include "pair_mlip.h"

#include <cstdio>

using namespace LAMMPS_NS;

static Pair *mlip_creator(LAMMPS *lmp)
{
  return new PairMLIP(lmp);
}

extern "C" void lammpsplugin_init(void *ptr, void *handle, void *regfunc)
{
  const int host = lammps_version(ptr);
  if (host != MLIP_LAMMPS_VERSION) {
    fprintf(stderr,
            "ERROR: mlipplugin.so was built for LAMMPS %s (%d) and refuses to load into LAMMPS %d: "
            "rebuild it against that LAMMPS's source tree; pair_style mlip is not registered\n",
            LAMMPS_VERSION, MLIP_LAMMPS_VERSION, host);
    return;
  }
  lammpsplugin_t plugin;
  auto register_plugin = (lammpsplugin_regfunc) regfunc;
  plugin.version = LAMMPS_VERSION;
  plugin.style = "pair";
  plugin.name = "mlip";
  plugin.info = "mlip machine-learning interatomic potentials (TorchScript models)";
  plugin.author = "the mlip developers";
  plugin.creator.v1 = (lammpsplugin_factory1 *) &mlip_creator;
  plugin.handle = handle;
  (*register_plugin)(&plugin, ptr);
}
