# cmake -DDIR=<Kokkos config dir> -DNEEDED=<version> -P kokkos-version.cmake: prints that Kokkos's
# version if it accepts find_package(Kokkos NEEDED), else nothing. For scripts/check-lammps.sh.
include(${CMAKE_CURRENT_LIST_DIR}/MlipKokkos.cmake)
mlip_kokkos_version("${DIR}" "${NEEDED}" version compatible)
if(version AND compatible)
  execute_process(COMMAND ${CMAKE_COMMAND} -E echo "${version}")
endif()
