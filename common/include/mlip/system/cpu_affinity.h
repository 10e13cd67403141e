// The CPUs a process may run on, for sizing its threads (mlip/model/runtime.h's fair_threads, the
// trainer's defaults, `mlip-trainer pack`'s statistics). No LibTorch here: part of mlip::core.
#pragma once

#include <vector>

namespace mlip {

/// The CPUs this process may run on (its CPU affinity: what mpirun's binding, srun's
/// --cpu-bind, taskset or a container's cpuset left it), in order, and the physical cores among
/// them (hyperthreads of a core count once). Empty (no CPUs, 0 cores) where that is unknown, and
/// where OpenMP binds threads itself (OMP_PROC_BIND, OMP_PLACES or GOMP_CPU_AFFINITY set): the
/// affinity then reads as its first thread's place, not the process's.
struct CpuAffinity {
  std::vector<int> cpus;
  int cores = 0;
};
CpuAffinity cpu_affinity();

}  // namespace mlip
