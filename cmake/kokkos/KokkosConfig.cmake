# Wrapper around Debian's Kokkos (trilinos 13.2) CMake config, whose Kokkos::kokkos target points
# at the non-existent /usr/lib/include. Pass -DKokkos_DIR=<this dir> to a LAMMPS configure.
include("/usr/lib/x86_64-linux-gnu/cmake/Kokkos/KokkosConfig.cmake")
set_target_properties(Kokkos::kokkos PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${Kokkos_INCLUDE_DIRS}")
