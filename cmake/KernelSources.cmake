# cmake -DOUT=<header> -DSOURCES=<files> -P cmake/KernelSources.cmake: writes <header>, which defines
# MLIP_KERNEL_SOURCES_HASH as the first 16 hex digits of the SHA-256 of the files' contents in order
# (common/src/ops/kernel_layout.h mixes it into the functors' layout: libmlip_cuda_ops.so and the
# library that passes it functors must be built from the same functor definitions). Called by
# common/CMakeLists.txt whenever one of the files changes.
set(digests "")
foreach(f IN LISTS SOURCES)
  file(SHA256 "${f}" digest)
  string(APPEND digests "${digest}")
endforeach()
string(SHA256 all "${digests}")
string(SUBSTRING "${all}" 0 16 head)
file(WRITE "${OUT}" "// Written by cmake/KernelSources.cmake from the device kernels' sources: do not edit.\n"
                    "#pragma once\n#define MLIP_KERNEL_SOURCES_HASH 0x${head}ull\n")
