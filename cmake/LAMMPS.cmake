# Builds LAMMPS with the MLIP package as an external project in <build>/lammps, and links
# <build>/bin/lmp to it. The LAMMPS tree comes from LAMMPS_SOURCE_DIR (any LAMMPS from 29Sep2021
# on) or from the Debian source package that scripts/install-deps.sh unpacked into third_party/
# (named in third_party/lammps-source).
#
# Or, with -DMLIP_LAMMPS_BUILD_DIR=<a LAMMPS build directory>, builds no LAMMPS and tests against
# that one (cmake/LammpsBuildDir.cmake): scripts/check-lammps.sh uses it for the other two routes.
include(ExternalProject)

set(MLIP_LAMMPS_BUILD_DIR "" CACHE PATH "An existing LAMMPS build to test against instead of building one")
if(MLIP_LAMMPS_BUILD_DIR)
  include(LammpsBuildDir)
  return()
endif()
set(MLIP_LAMMPS_HAS_MLIP ON)

set(LAMMPS_SOURCE_DIR "$ENV{LAMMPS_SOURCE_DIR}" CACHE PATH "LAMMPS source tree (top level, with src/ and cmake/)")
if(NOT LAMMPS_SOURCE_DIR AND EXISTS "${PROJECT_SOURCE_DIR}/third_party/lammps-source")
  # The tree scripts/install-deps.sh fetched (the pinned Debian source package, or the fallback
  # it announced).
  file(STRINGS "${PROJECT_SOURCE_DIR}/third_party/lammps-source" dir LIMIT_COUNT 1)
  set(LAMMPS_SOURCE_DIR "${dir}" CACHE PATH "LAMMPS source tree" FORCE)
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
  # mlip's core as this project compiled it (common/CMakeLists.txt: not compiled a second time)
  -DMLIP_PREBUILT_OBJECTS=${PROJECT_BINARY_DIR}/mlip-objects.cmake
)
# The same LibTorch as the rest of mlip (cmake/MlipTorch.cmake); both settings are passed, one
# empty, so that a switch replaces what the sub-build cached.
if(MLIP_TORCH_PYTHON)
  list(APPEND lammps_args -DMLIP_TORCH_PYTHON=${MLIP_TORCH_PYTHON} -DTorch_DIR=)
else()
  list(APPEND lammps_args -DMLIP_TORCH_PYTHON= -DTorch_DIR=${Torch_DIR})
endif()
list(APPEND lammps_args -DMLIP_LINK_TORCH_CUDA=${MLIP_LINK_TORCH_CUDA})
# Where this configure was told to look for its dependencies (scripts/gpu-check.sh: an MPI, JSON
# and fmt from its bundle), the sub-build looks too; and under the same CMake policy floor (CMake
# >= 4 with packages that ask for a CMake < 3.5).
foreach(var CMAKE_PREFIX_PATH MPI_C_COMPILER MPI_CXX_COMPILER CUDAToolkit_ROOT CMAKE_POLICY_VERSION_MINIMUM)
  if(NOT "${${var}}" STREQUAL "")
    string(REPLACE ";" "|" value "${${var}}")
    list(APPEND lammps_args "-D${var}=${value}")
  endif()
endforeach()

# KOKKOS (pair_style mlip/kk) when a Kokkos that this LAMMPS accepts is at hand; otherwise one
# line says why not. Each LAMMPS release names its minimum (29Sep2021: 3.4, 4Jul2026: 5.1).
include(MlipKokkos)
mlip_choose_kokkos("${LAMMPS_SOURCE_DIR}" MLIP_KOKKOS_DIR)
if(MLIP_KOKKOS_DIR)
  list(APPEND lammps_args -DPKG_KOKKOS=on -DEXTERNAL_KOKKOS=on -DKokkos_DIR=${MLIP_KOKKOS_DIR})
else()
  list(APPEND lammps_args -DPKG_KOKKOS=off)
endif()
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
  # LAMMPS checks the tarball's MD5 (29Sep2021) or SHA256 (later releases): give both.
  file(MD5 "${gtest_tarball}" gtest_md5)
  file(SHA256 "${gtest_tarball}" gtest_sha256)
  list(APPEND lammps_args -DENABLE_TESTING=on -DGTEST_URL=file://${gtest_tarball} -DGTEST_MD5=${gtest_md5}
                          -DGTEST_SHA256=${gtest_sha256} --no-warn-unused-cli)
  list(APPEND lammps_targets test_pair_style)
  mlip_lammps_test_pair_style("${LAMMPS_SOURCE_DIR}" "${MLIP_LAMMPS_BINARY_DIR}" MLIP_LAMMPS_TEST_PAIR_STYLE)
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
  DEPENDS mlip_core mlip_model
  LIST_SEPARATOR |
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
