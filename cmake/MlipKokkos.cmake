# mlip_choose_kokkos(<lammps tree> <out var>): the Kokkos_DIR to build LAMMPS's KOKKOS package
# against, or "" (and one line saying why) when no Kokkos at hand is new enough for this LAMMPS.
#
# Candidates, first that LAMMPS accepts wins:
#   -DKokkos_DIR=<dir>                  the user's Kokkos (its KokkosConfig.cmake)
#   third_party/kokkos/lib/cmake/Kokkos  built by scripts/install-deps.sh when a source is found
#   cmake/kokkos                         Debian 12's Kokkos 3.4 (libtrilinos-kokkos-dev), through a
#                                        wrapper for its broken config file
function(mlip_kokkos_version dir out)
  set(${out} "" PARENT_SCOPE)
  foreach(file KokkosConfigVersion.cmake kokkos-config-version.cmake)
    if(EXISTS "${dir}/${file}")
      set(PACKAGE_FIND_VERSION 0.0.0)
      include("${dir}/${file}")
      set(${out} "${PACKAGE_VERSION}" PARENT_SCOPE)
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
  set(candidates ${Kokkos_DIR} ${PROJECT_SOURCE_DIR}/third_party/kokkos/lib/cmake/Kokkos
                 ${PROJECT_SOURCE_DIR}/cmake/kokkos)
  set(seen "")
  foreach(dir IN LISTS candidates)
    mlip_kokkos_version("${dir}" version)
    if(NOT version)
      continue()
    endif()
    if(version VERSION_GREATER_EQUAL needed)
      message(STATUS "KOKKOS on: Kokkos ${version} from ${dir} (this LAMMPS needs >= ${needed})")
      set(${out} "${dir}" PARENT_SCOPE)
      return()
    endif()
    list(APPEND seen "${version} in ${dir}")
  endforeach()
  if(NOT seen)
    set(seen "none")
  endif()
  message(STATUS "KOKKOS off: this LAMMPS needs Kokkos >= ${needed}; found: ${seen}. "
                 "Pass -DKokkos_DIR=<Kokkos >= ${needed}>/lib/cmake/Kokkos to build pair_style mlip/kk.")
endfunction()
