# mlip_choose_kokkos(<lammps tree> <out var>): the Kokkos_DIR to build LAMMPS's KOKKOS package
# against, or "" (and one line saying why) when no Kokkos at hand is new enough for this LAMMPS.
#
# Candidates, first that LAMMPS accepts wins:
#   -DKokkos_DIR=<dir>                  the user's Kokkos (its KokkosConfig.cmake)
#   third_party/kokkos/lib/cmake/Kokkos  built by scripts/install-deps.sh when a source is found
#   cmake/kokkos                         Debian 12's Kokkos 3.4 (libtrilinos-kokkos-dev), through a
#                                        wrapper for its broken config file
# mlip_kokkos_version(<config dir> <needed> <out version> <out compatible>): the version of the
# Kokkos whose config is in <config dir> ("" if none) and whether its own version file accepts
# `find_package(Kokkos <needed>)` (Kokkos accepts the same major version only).
function(mlip_kokkos_version dir needed out_version out_ok)
  set(${out_version} "" PARENT_SCOPE)
  set(${out_ok} FALSE PARENT_SCOPE)
  foreach(file KokkosConfigVersion.cmake kokkos-config-version.cmake)
    if(EXISTS "${dir}/${file}")
      set(PACKAGE_FIND_VERSION ${needed})
      string(REPLACE "." ";" parts "${needed}.0.0")
      list(GET parts 0 PACKAGE_FIND_VERSION_MAJOR)
      list(GET parts 1 PACKAGE_FIND_VERSION_MINOR)
      list(GET parts 2 PACKAGE_FIND_VERSION_PATCH)
      set(PACKAGE_VERSION_COMPATIBLE FALSE)
      include("${dir}/${file}")
      set(${out_version} "${PACKAGE_VERSION}" PARENT_SCOPE)
      set(${out_ok} ${PACKAGE_VERSION_COMPATIBLE} PARENT_SCOPE)
      return()
    endif()
  endforeach()
endfunction()

function(mlip_choose_kokkos lammps_dir out)
  set(${out} "" PARENT_SCOPE)
  file(STRINGS "${lammps_dir}/cmake/Modules/Packages/KOKKOS.cmake" line REGEX "find_package\\(Kokkos [0-9.]+")
  if(NOT line MATCHES "find_package\\(Kokkos ([0-9.]+)")
    message(STATUS "KOKKOS off: cannot read the Kokkos version that ${lammps_dir} needs")
    return()
  endif()
  set(needed ${CMAKE_MATCH_1})
  string(REGEX MATCH "^[0-9]+" needed_major "${needed}")
  set(candidates ${Kokkos_DIR} ${PROJECT_SOURCE_DIR}/third_party/kokkos/lib/cmake/Kokkos
                 ${PROJECT_SOURCE_DIR}/cmake/kokkos)
  set(seen "")
  foreach(dir IN LISTS candidates)
    mlip_kokkos_version("${dir}" ${needed} version compatible)
    if(NOT version)
      continue()
    endif()
    if(compatible)
      message(STATUS "KOKKOS on: Kokkos ${version} from ${dir} (this LAMMPS asks for ${needed})")
      set(${out} "${dir}" PARENT_SCOPE)
      return()
    endif()
    list(APPEND seen "${version} in ${dir}")
  endforeach()
  if(NOT seen)
    set(seen "none")
  endif()
  message(STATUS "KOKKOS off: this LAMMPS needs Kokkos ${needed} or a later ${needed_major}.x; found: ${seen}. "
                 "Pass -DKokkos_DIR=<Kokkos >= ${needed}>/lib/cmake/Kokkos to build pair_style mlip/kk.")
endfunction()
