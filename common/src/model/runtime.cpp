#include "mlip/model/runtime.h"

#include <ATen/Parallel.h>
#include <ATen/Version.h>

#include <cstdlib>

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

void use_one_thread_here() {
  // ATen sets a thread's team size at its first use of the thread (from the process's count):
  // that first, so that it does not undo the next line.
  (void)at::get_num_threads();
#ifdef _OPENMP
  omp_set_num_threads(1);   // this thread's own setting (OpenMP's nthreads-var is per thread)
#endif
}

int64_t peak_resident_bytes() {
#if defined(__linux__)
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) == 0) return static_cast<int64_t>(ru.ru_maxrss) * 1024;   // KiB
#endif
  return -1;
}

}  // namespace mlip
