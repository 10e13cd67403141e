# Builds LAMMPS with the MLIP package as an external project in <build>/lammps, and links
# <build>/bin/lmp to it. The LAMMPS tree comes from LAMMPS_SOURCE_DIR (any LAMMPS from 29Sep2021
# on) or from Debian's source package unpacked by scripts/install-deps.sh into third_party/.
include(ExternalProject)

set(LAMMPS_SOURCE_DIR "$ENV{LAMMPS_SOURCE_DIR}" CACHE PATH "LAMMPS source tree (top level, with src/ and cmake/)")
if(NOT LAMMPS_SOURCE_DIR)
  file(GLOB candidates LIST_DIRECTORIES true "${PROJECT_SOURCE_DIR}/third_party/lammps-*")
  foreach(dir IN LISTS candidates)
    if(EXISTS "${dir}/cmake/CMakeLists.txt")
      set(LAMMPS_SOURCE_DIR "${dir}" CACHE PATH "LAMMPS source tree" FORCE)
      break()
    endif()
  endforeach()
endif()
if(NOT EXISTS "${LAMMPS_SOURCE_DIR}/cmake/CMakeLists.txt")
  message(FATAL_ERROR "No LAMMPS source tree found. Run scripts/install-deps.sh (unpacks Debian's LAMMPS "
                      "into third_party/), pass -DLAMMPS_SOURCE_DIR=<your lammps checkout>, or "
                      "configure with -DMLIP_BUILD_LAMMPS=OFF.")
endif()
include(LammpsVersion)
mlip_lammps_version("${LAMMPS_SOURCE_DIR}/src" MLIP_LAMMPS_VERSION)
if(MLIP_LAMMPS_VERSION LESS 20210929)
  message(FATAL_ERROR "LAMMPS ${MLIP_LAMMPS_VERSION} in ${LAMMPS_SOURCE_DIR} is older than 29Sep2021")
endif()
message(STATUS "LAMMPS source: ${LAMMPS_SOURCE_DIR} (${MLIP_LAMMPS_VERSION})")

set(MLIP_LAMMPS_BINARY_DIR ${PROJECT_BINARY_DIR}/lammps)
set(lammps_args
  -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE}
  -DCMAKE_INSTALL_PREFIX=${CMAKE_INSTALL_PREFIX}
  -DCMAKE_CXX_COMPILER=${CMAKE_CXX_COMPILER}
  -DCMAKE_PROJECT_lammps_INCLUDE=${PROJECT_SOURCE_DIR}/cmake/lammps/MLIP.cmake
  -DPKG_MLIP=on
  -DBUILD_MPI=on
  -DBUILD_OMP=off
  -DBUILD_SHARED_LIBS=on
  -DLAMMPS_EXCEPTIONS=on
  -DPKG_PLUGIN=on
  -DPKG_MOLECULE=on
  -DPKG_ML-SNAP=on
  -DPKG_KOKKOS=on
  -DEXTERNAL_KOKKOS=on
  -DKokkos_DIR=${PROJECT_SOURCE_DIR}/cmake/kokkos
)
if(CMAKE_CXX_COMPILER_LAUNCHER)
  list(APPEND lammps_args -DCMAKE_CXX_COMPILER_LAUNCHER=${CMAKE_CXX_COMPILER_LAUNCHER})
endif()

# LAMMPS's force-style test driver (unittest/force-styles/test_pair_style), which tests/lammps/
# runs on mlip's YAML cases. LAMMPS's unit tests download googletest from GitHub, which may be
# unreachable: feed them a tarball of the local googletest sources (Debian: googletest package)
# made here at configure time.
set(MLIP_GTEST_SOURCE_DIR "/usr/src/googletest" CACHE PATH
    "googletest sources for LAMMPS's unit-test build (the force-style harness); empty to skip it")
set(lammps_targets lmp)
set(MLIP_LAMMPS_TEST_PAIR_STYLE "")
find_package(PkgConfig QUIET)
if(PkgConfig_FOUND)
  pkg_check_modules(MLIP_YAML QUIET yaml-0.1)
endif()
if(MLIP_GTEST_SOURCE_DIR AND EXISTS "${MLIP_GTEST_SOURCE_DIR}/CMakeLists.txt" AND MLIP_YAML_FOUND)
  get_filename_component(gtest_parent "${MLIP_GTEST_SOURCE_DIR}" DIRECTORY)
  get_filename_component(gtest_name "${MLIP_GTEST_SOURCE_DIR}" NAME)
  set(gtest_tarball "${PROJECT_BINARY_DIR}/gtest-local.tar.gz")
  if(NOT EXISTS "${gtest_tarball}")
    execute_process(COMMAND tar -C "${gtest_parent}" -czf "${gtest_tarball}" "${gtest_name}"
                    RESULT_VARIABLE tar_rc)
    if(NOT tar_rc EQUAL 0)
      file(REMOVE "${gtest_tarball}")
      message(FATAL_ERROR "cannot pack ${MLIP_GTEST_SOURCE_DIR} into ${gtest_tarball} (tar: ${tar_rc})")
    endif()
  endif()
  file(MD5 "${gtest_tarball}" gtest_md5)
  list(APPEND lammps_args -DENABLE_TESTING=on -DGTEST_URL=file://${gtest_tarball} -DGTEST_MD5=${gtest_md5})
  list(APPEND lammps_targets test_pair_style)
  set(MLIP_LAMMPS_TEST_PAIR_STYLE ${MLIP_LAMMPS_BINARY_DIR}/unittest/force-styles/test_pair_style)
  message(STATUS "LAMMPS force-style harness: test_pair_style (googletest from ${MLIP_GTEST_SOURCE_DIR})")
else()
  message(STATUS "LAMMPS force-style harness skipped: needs googletest sources in MLIP_GTEST_SOURCE_DIR "
                 "(${MLIP_GTEST_SOURCE_DIR}) and libyaml (yaml-0.1)")
endif()

ExternalProject_Add(lammps
  SOURCE_DIR ${LAMMPS_SOURCE_DIR}/cmake
  BINARY_DIR ${MLIP_LAMMPS_BINARY_DIR}
  CMAKE_GENERATOR ${CMAKE_GENERATOR}
  CMAKE_ARGS ${lammps_args}
  BUILD_COMMAND ${CMAKE_COMMAND} --build ${MLIP_LAMMPS_BINARY_DIR} --target ${lammps_targets} -j ${MLIP_LAMMPS_JOBS}
  BUILD_ALWAYS ON
  BUILD_BYPRODUCTS ${MLIP_LAMMPS_BINARY_DIR}/liblammps.so ${MLIP_LAMMPS_BINARY_DIR}/lmp ${MLIP_LAMMPS_TEST_PAIR_STYLE}
  INSTALL_COMMAND ""
  USES_TERMINAL_CONFIGURE ON
  USES_TERMINAL_BUILD ON
)
ExternalProject_Add_Step(lammps link-bin
  COMMAND ${CMAKE_COMMAND} -E make_directory ${PROJECT_BINARY_DIR}/bin
  COMMAND ${CMAKE_COMMAND} -E create_symlink ${MLIP_LAMMPS_BINARY_DIR}/lmp ${PROJECT_BINARY_DIR}/bin/lmp
  DEPENDEES build
  ALWAYS ON
)
set(MLIP_LMP ${PROJECT_BINARY_DIR}/bin/lmp)

# `cmake --install` installs LAMMPS (lmp, liblammps, headers) next to mlip's own files.
install(CODE "execute_process(COMMAND \"${CMAKE_COMMAND}\" --install \"${MLIP_LAMMPS_BINARY_DIR}\" --prefix \"\${CMAKE_INSTALL_PREFIX}\" COMMAND_ERROR_IS_FATAL ANY)")
