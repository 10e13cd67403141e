# cmake -DLAMMPS=<lammps tree> [-DKokkos_DIR=<dir>] -P choose-kokkos.cmake: prints the Kokkos
# config dir that mlip_choose_kokkos() picks for that LAMMPS (nothing if none), the same choice
# mlip's own LAMMPS build makes. For scripts/check-lammps.sh.
get_filename_component(PROJECT_SOURCE_DIR "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)
include(${CMAKE_CURRENT_LIST_DIR}/MlipKokkos.cmake)
mlip_choose_kokkos("${LAMMPS}" dir)
if(dir)
  execute_process(COMMAND ${CMAKE_COMMAND} -E echo "${dir}")
endif()
