include("/usr/lib/x86_64-linux-gnu/cmake/Kokkos/KokkosConfigVersion.cmake" OPTIONAL)
