# The MLIP package for a LAMMPS CMake build, with no edit to LAMMPS's own files:
#
#   cmake -S <lammps>/cmake -B build \
#         -DCMAKE_PROJECT_lammps_INCLUDE=<mlip>/cmake/lammps/MLIP.cmake -DPKG_MLIP=on ...
#
# CMake includes this file right after LAMMPS's project() call (CMAKE_PROJECT_<name>_INCLUDE,
# CMake >= 3.15). LAMMPS 29Sep2021 has no hook for outside packages, so the work that needs the
# `lammps` target and the style headers is deferred to the end of LAMMPS's CMakeLists.txt
# (cmake_language(DEFER), CMake >= 3.19). Works with any LAMMPS tree from 29Sep2021 on.
option(PKG_MLIP "Build the MLIP package (pair_style mlip)" OFF)
if(NOT PKG_MLIP)
  return()
endif()
if(CMAKE_VERSION VERSION_LESS 3.19)
  message(FATAL_ERROR "The MLIP package needs CMake >= 3.19 (found ${CMAKE_VERSION})")
endif()

get_filename_component(MLIP_ROOT "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)
include(${MLIP_ROOT}/cmake/LammpsVersion.cmake)
include(${MLIP_ROOT}/cmake/MlipWarnings.cmake)

# mlip's core, compiled in this build so that a user's own LAMMPS tree needs nothing prebuilt.
add_subdirectory(${MLIP_ROOT}/common ${CMAKE_BINARY_DIR}/mlip-common)

function(mlip_add_package)
  mlip_lammps_definitions(${LAMMPS_SOURCE_DIR} lammps_defs)
  set(sources ${MLIP_ROOT}/pair_style/pair_mlip.cpp ${MLIP_ROOT}/pair_style/pair_mlip_deviation.cpp
              ${MLIP_ROOT}/pair_style/pair_mlip_exchange.cpp ${MLIP_ROOT}/pair_style/pair_mlip_device_graph.cpp
              ${MLIP_ROOT}/pair_style/pair_mlip_keywords.cpp)
  if(PKG_KOKKOS)
    # pair_style mlip/kk, mlip/kk/device, mlip/kk/host (pair_mlip_kokkos.h).
    list(APPEND sources ${MLIP_ROOT}/pair_style/pair_mlip_kokkos.cpp)
    # Kokkos on CUDA: LibTorch runs the model on Kokkos's stream (c10_cuda's external streams).
    if(Kokkos_ENABLE_CUDA OR KOKKOS_ENABLE_CUDA)
      if(NOT TARGET c10_cuda)
        message(FATAL_ERROR "MLIP: Kokkos has CUDA but this LibTorch has no c10_cuda: mlip/kk on the GPU needs "
                            "a CUDA build of LibTorch (PyPI's torch wheel)")
      endif()
      target_link_libraries(lammps PRIVATE c10_cuda)
    endif()
  endif()
  target_sources(lammps PRIVATE ${sources})
  target_include_directories(lammps PRIVATE ${MLIP_ROOT}/pair_style)
  target_link_libraries(lammps PRIVATE mlip::model)
  # LAMMPS sets C++11 (Kokkos raises it to 14); LibTorch needs C++17.
  target_compile_features(lammps PUBLIC cxx_std_17)
  set_source_files_properties(${sources} PROPERTIES
    COMPILE_DEFINITIONS "${lammps_defs}"
    COMPILE_OPTIONS "-Wall;-Wextra")

  # Register the style and regenerate style_pair.h, which LAMMPS wrote before this point.
  AddStyleHeader(${MLIP_ROOT}/pair_style/pair_mlip.h PAIR)
  if(PKG_KOKKOS)
    AddStyleHeader(${MLIP_ROOT}/pair_style/pair_mlip_kokkos.h PAIR)
  endif()
  GenerateStyleHeader(${LAMMPS_STYLE_HEADERS_DIR} PAIR pair)

  # List MLIP among the installed packages (lmp -h, info).
  set(pkgs "${LAMMPS_STYLE_HEADERS_DIR}/lmpinstalledpkgs.h")
  file(READ ${pkgs} text)
  if(NOT text MATCHES "\"MLIP\"")
    string(REPLACE "  NULL\n" "  \"MLIP\",\n  NULL\n" text "${text}")
    file(WRITE ${pkgs}.tmp "${text}")
    execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${pkgs}.tmp ${pkgs})
  endif()
  message(STATUS "MLIP package enabled (${lammps_defs})")
endfunction()

cmake_language(DEFER DIRECTORY ${CMAKE_SOURCE_DIR} CALL mlip_add_package)
