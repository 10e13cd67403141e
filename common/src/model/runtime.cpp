#include "mlip/model/runtime.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include <cstdlib>
#include <string>

#ifdef __GLIBC__
#include <malloc.h>
#endif
#if defined(__linux__)
#include <sched.h>
#include <sys/resource.h>
#endif
#ifdef _OPENMP
#include <omp.h>
#endif

namespace mlip {

void prefer_avx512_kernels() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq")) {
    setenv("ATEN_CPU_CAPABILITY", "avx512", /*overwrite=*/0);
  }
#endif
}

std::string cpu_capability() {
  const std::string config = at::show_config();
  const std::string key = "CPU capability usage: ";
  const auto at = config.find(key);
  if (at == std::string::npos) return "unknown";
  const auto begin = at + key.size(), end = config.find('\n', begin);
  return config.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
}

bool keep_freed_memory() {
#ifdef __GLIBC__
  if (std::getenv("MALLOC_MMAP_THRESHOLD_") || std::getenv("MALLOC_TRIM_THRESHOLD_")) return false;
  return mallopt(M_MMAP_THRESHOLD, 1 << 30) == 1 && mallopt(M_TRIM_THRESHOLD, -1) == 1 &&
         mallopt(M_TOP_PAD, 256 << 20) == 1;
#else
  return false;
#endif
}

void use_one_thread_here() {
  // ATen sets a thread's team size at its first use of the thread (from the process's count):
  // that first, so that it does not undo the next line.
  (void)at::get_num_threads();
#ifdef _OPENMP
  omp_set_num_threads(1);   // this thread's own setting (OpenMP's nthreads-var is per thread)
#endif
}

std::vector<int> affinity_cpus() {
  std::vector<int> cpus;
#if defined(__linux__) && defined(CPU_ISSET)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
#endif
  return cpus;
}

int fair_threads(const std::vector<int>& mine, const std::vector<int>& ranks_on) {
  double share = 0;
  for (int c : mine) {
    const int n = c >= 0 && static_cast<std::size_t>(c) < ranks_on.size() ? ranks_on[static_cast<std::size_t>(c)] : 1;
    share += 1.0 / (n > 0 ? n : 1);
  }
  return share < 1 ? 1 : static_cast<int>(share + 1e-9);
}

std::string threads_beyond_cores(int threads) {
  const std::size_t cores = affinity_cpus().size();
  if (cores == 0 || static_cast<std::size_t>(threads) <= cores) return {};
  return std::to_string(threads) + " LibTorch threads, but this process may run on " + std::to_string(cores) +
         " core(s) (its CPU affinity: Open MPI binds a rank to one core by default), so they take turns and each "
         "step waits: give each rank as many cores (mpirun --map-by slot:PE=" + std::to_string(threads) +
         ", or --bind-to none), or fewer threads";
}

int64_t peak_resident_bytes() {
#if defined(__linux__)
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) == 0) return static_cast<int64_t>(ru.ru_maxrss) * 1024;   // KiB
#endif
  return -1;
}

}  // namespace mlip
