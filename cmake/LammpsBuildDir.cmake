# Uses the LAMMPS build in MLIP_LAMMPS_BUILD_DIR (shared library, PLUGIN package) instead of
# building one; included by cmake/LAMMPS.cmake. Two cases:
#   - built with the MLIP package (a user's LAMMPS: -DCMAKE_PROJECT_lammps_INCLUDE=
#     <mlip>/cmake/lammps/MLIP.cmake -DPKG_MLIP=on): the tests run its pair_style mlip;
#   - built without it: the tests load build/lib/mlipplugin.so into it (plugin load).
# Sets LAMMPS_SOURCE_DIR, MLIP_LAMMPS_VERSION, MLIP_LAMMPS_BINARY_DIR, MLIP_LAMMPS_HAS_MLIP,
# MLIP_LAMMPS_TEST_PAIR_STYLE and an empty `lammps` target for the tests to depend on.
set(MLIP_LAMMPS_BINARY_DIR "${MLIP_LAMMPS_BUILD_DIR}")
if(NOT EXISTS "${MLIP_LAMMPS_BINARY_DIR}/liblammps.so" OR NOT EXISTS "${MLIP_LAMMPS_BINARY_DIR}/CMakeCache.txt")
  message(FATAL_ERROR "MLIP_LAMMPS_BUILD_DIR=${MLIP_LAMMPS_BINARY_DIR} is not a LAMMPS build with a shared "
                      "library (configure LAMMPS with -DBUILD_SHARED_LIBS=on and build it first)")
endif()
load_cache("${MLIP_LAMMPS_BINARY_DIR}" READ_WITH_PREFIX lmp_ lammps_SOURCE_DIR PKG_PLUGIN LAMMPS_EXCEPTIONS)
get_filename_component(LAMMPS_SOURCE_DIR "${lmp_lammps_SOURCE_DIR}/.." ABSOLUTE)
include(LammpsVersion)
mlip_lammps_version("${LAMMPS_SOURCE_DIR}/src" MLIP_LAMMPS_VERSION)

file(READ "${MLIP_LAMMPS_BINARY_DIR}/styles/lmpinstalledpkgs.h" installed)
if(installed MATCHES "\"MLIP\"")
  set(MLIP_LAMMPS_HAS_MLIP ON)
  set(route "its MLIP package")
else()
  set(MLIP_LAMMPS_HAS_MLIP OFF)
  set(route "plugin load of mlipplugin.so")
  if(NOT lmp_PKG_PLUGIN)
    message(FATAL_ERROR "${MLIP_LAMMPS_BINARY_DIR} has neither the MLIP nor the PLUGIN package: rebuild "
                        "LAMMPS with -DPKG_PLUGIN=on (to load mlipplugin.so) or with the MLIP package")
  endif()
endif()
if(NOT lmp_LAMMPS_EXCEPTIONS AND MLIP_LAMMPS_VERSION LESS 20230208)
  message(FATAL_ERROR "${MLIP_LAMMPS_BINARY_DIR}: mlip's tests need -DLAMMPS_EXCEPTIONS=on in this LAMMPS version")
endif()
message(STATUS "LAMMPS build: ${MLIP_LAMMPS_BINARY_DIR} (${MLIP_LAMMPS_VERSION}, source ${LAMMPS_SOURCE_DIR}); "
               "pair_style mlip through ${route}")

mlip_lammps_test_pair_style("${LAMMPS_SOURCE_DIR}" "${MLIP_LAMMPS_BINARY_DIR}" MLIP_LAMMPS_TEST_PAIR_STYLE)
if(NOT MLIP_LAMMPS_HAS_MLIP OR NOT EXISTS "${MLIP_LAMMPS_TEST_PAIR_STYLE}")
  set(MLIP_LAMMPS_TEST_PAIR_STYLE "")
  message(STATUS "LAMMPS force-style harness skipped: no ${MLIP_LAMMPS_BINARY_DIR}'s test_pair_style with the "
                 "MLIP package (configure LAMMPS with -DENABLE_TESTING=on and build test_pair_style)")
endif()
add_custom_target(lammps
  COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/bin
  COMMAND ${CMAKE_COMMAND} -E create_symlink ${MLIP_LAMMPS_BINARY_DIR}/lmp ${PROJECT_BINARY_DIR}/bin/lmp)
set(MLIP_LMP ${PROJECT_BINARY_DIR}/bin/lmp)
