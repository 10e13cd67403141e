// Attributes of mlip's hand-written CPU kernels (the operators in tabulated_embedding.cpp and
// edge_contraction.cpp): helpers inlined into their callers, and the callers cloned per ISA
// (GCC function multi-versioning picks the widest the CPU has at load time). The loops use
// `omp simd` (-fopenmp-simd: no OpenMP runtime) so that they vectorise without -ffast-math.
#pragma once

#if defined(__GNUC__)
#define MLIP_KERNEL inline __attribute__((always_inline))
#else
#define MLIP_KERNEL inline
#endif

#if defined(__GNUC__) && __GNUC__ >= 12 && defined(__x86_64__) && defined(__GLIBC__) && !defined(__clang__) && \
    !defined(__CUDACC__) && !defined(__SANITIZE_ADDRESS__)
#define MLIP_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define MLIP_CLONES
#endif
