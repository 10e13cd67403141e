#include "mlip/system/cpu_affinity.h"

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(__linux__)
#include <sched.h>
#endif

namespace mlip {

namespace {

// Whether OpenMP binds threads itself: it then binds the process's first thread to one place when
// it loads, and the process's affinity reads as that place.
bool openmp_binds_threads() {
  const char* bind = std::getenv("OMP_PROC_BIND");
  if (bind && std::string(bind) != "false" && std::string(bind) != "FALSE") return true;
  return std::getenv("OMP_PLACES") || std::getenv("GOMP_CPU_AFFINITY");
}

// The physical cores among `cpus` (their core and package in sysfs); cpus.size() where unknown.
int physical_cores(const std::vector<int>& cpus) {
  std::set<std::pair<long, long>> cores;
  for (int c : cpus) {
    const std::string at = "/sys/devices/system/cpu/cpu" + std::to_string(c) + "/topology/";
    long core = -1, package = -1;
    std::ifstream(at + "core_id") >> core;
    std::ifstream(at + "physical_package_id") >> package;
    if (core < 0 || package < 0) return static_cast<int>(cpus.size());
    cores.emplace(package, core);
  }
  return static_cast<int>(cores.size());
}

}  // namespace

CpuAffinity cpu_affinity() {
  CpuAffinity a;
#if defined(__linux__) && defined(CPU_ALLOC)
  if (openmp_binds_threads()) return a;
  for (int n = 1024; n <= (1 << 20); n *= 2) {   // sets of more CPUs than the kernel's are refused
    cpu_set_t* set = CPU_ALLOC(n);
    const std::size_t bytes = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(bytes, set);
    const int rc = sched_getaffinity(0, bytes, set);
    if (rc == 0)
      for (int c = 0; c < n; ++c)
        if (CPU_ISSET_S(c, bytes, set)) a.cpus.push_back(c);
    CPU_FREE(set);
    if (rc == 0 || errno != EINVAL) break;
  }
  a.cores = physical_cores(a.cpus);
#endif
  return a;
}

}  // namespace mlip
