# cmake -DDIR=<Kokkos config dir> -P kokkos-version.cmake: prints that Kokkos's version (nothing if
# DIR has no Kokkos). For scripts/check-lammps.sh.
include(${CMAKE_CURRENT_LIST_DIR}/MlipKokkos.cmake)
mlip_kokkos_version("${DIR}" version)
if(version)
  execute_process(COMMAND ${CMAKE_COMMAND} -E echo "${version}")
endif()
