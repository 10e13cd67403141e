// pair_style mlip as a LAMMPS plugin: `plugin load mlipplugin.so` in a LAMMPS binary built with
// the PLUGIN package, no MLIP package needed. Same sources as the package.
//
// A plugin is compiled against one LAMMPS version's headers; its class layouts and the symbols it
// needs (fmt's versioned namespace, Pair's virtual functions) change between releases. LAMMPS
// opens plugins with RTLD_NOW, so loading the pair style into another release would fail on an
// undefined symbol, or crash later. This file is the entry point and needs nothing but the C
// library interface and libdl: it asks the host its version and refuses in one line, naming
// both, when it differs; otherwise it loads the pair style itself (mlipplugin_impl.so, beside
// this file) and lets it register.
#include "library.h"
#include "lammpsplugin.h"
#include "version.h"

#include <dlfcn.h>

#include <cstdio>
#include <string>

namespace {

// The directory this file was loaded from ("" if unknown).
std::string own_directory()
{
  Dl_info info;
  if (dladdr(reinterpret_cast<void *>(&own_directory), &info) == 0 || !info.dli_fname) return "";
  const std::string path = info.dli_fname;
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

}    // namespace

extern "C" void lammpsplugin_init(void *lmp, void *handle, void *regfunc)
{
  const int host = lammps_version(lmp);
  if (host != MLIP_LAMMPS_VERSION) {
    fprintf(stderr,
            "ERROR: mlipplugin.so was built for LAMMPS %s (%d) and refuses to load into LAMMPS %d: "
            "rebuild it against that LAMMPS's source tree; pair_style mlip is not registered\n",
            LAMMPS_VERSION, MLIP_LAMMPS_VERSION, host);
    return;
  }
  const std::string impl = own_directory() + "mlipplugin_impl.so";
  void *dso = dlopen(impl.c_str(), RTLD_NOW | RTLD_GLOBAL);
  using Register = void (*)(void *, void *, void *);
  auto *reg = dso ? reinterpret_cast<Register>(dlsym(dso, "mlip_register_pair_style")) : nullptr;
  if (!reg) {
    fprintf(stderr, "ERROR: mlipplugin.so cannot load %s (%s); pair_style mlip is not registered\n", impl.c_str(),
            dlerror());
    return;
  }
  reg(lmp, handle, regfunc);
}
