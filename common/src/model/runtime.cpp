#include "mlip/model/runtime.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include <cstdlib>
#include <string>

#ifdef __GLIBC__
#include <malloc.h>
#endif
#if defined(__linux__)
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

bool use_one_thread_here() {
  // ATen sets a thread's team size at its first use of the thread, from the process's count, and
  // marks it done in a per-thread flag of which LibTorch and mlip's own files (those built with
  // OpenMP, as this one) each hold a copy: both first, so that neither undoes the next line.
  (void)at::get_num_threads();
  at::internal::lazy_init_num_threads();
#ifdef _OPENMP
  omp_set_num_threads(1);   // this thread's own setting (OpenMP's nthreads-var is per thread)
  return true;
#else
  return false;
#endif
}

int fair_threads(const CpuAffinity& mine, const std::vector<int>& ranks_on) {
  double share = 0;   // in logical CPUs
  for (int c : mine.cpus) {
    const int n = c >= 0 && static_cast<std::size_t>(c) < ranks_on.size() ? ranks_on[static_cast<std::size_t>(c)] : 1;
    share += 1.0 / (n > 0 ? n : 1);
  }
  if (!mine.cpus.empty()) share *= static_cast<double>(mine.cores) / static_cast<double>(mine.cpus.size());
  return share < 1 ? 1 : static_cast<int>(share + 1e-9);
}

std::string threads_beyond_cores(int threads) {
  const int cores = cpu_affinity().cores;
  if (cores == 0 || threads <= cores) return {};
  return std::to_string(threads) + " LibTorch threads, but this process may run on " + std::to_string(cores) +
         " core(s) (its CPU affinity: mpirun binds each rank to a core or a socket by default), so they take turns "
         "and each step waits: give each rank as many cores (mpirun --map-by slot:PE=" + std::to_string(threads) +
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
