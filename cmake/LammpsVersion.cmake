# mlip_lammps_version(<lammps src dir> <out var>): the LAMMPS release date as yyyymmdd, read from
# src/version.h ("29 Sep 2021" -> 20210929). pair_mlip.cpp compiles against the old or new
# neighbour-request API depending on it (MLIP_LAMMPS_VERSION).
function(mlip_lammps_version src_dir out)
  file(STRINGS "${src_dir}/version.h" line REGEX "^#define LAMMPS_VERSION ")
  if(NOT line MATCHES "\"([0-9]+) ([A-Za-z]+) ([0-9]+)\"")
    message(FATAL_ERROR "mlip: cannot read the LAMMPS version from ${src_dir}/version.h")
  endif()
  set(day ${CMAKE_MATCH_1})
  set(year ${CMAKE_MATCH_3})
  set(months Jan Feb Mar Apr May Jun Jul Aug Sep Oct Nov Dec)
  list(FIND months ${CMAKE_MATCH_2} month)
  math(EXPR value "${year} * 10000 + (${month} + 1) * 100 + ${day}")
  set(${out} ${value} PARENT_SCOPE)
endfunction()

# The LAMMPS release (24Mar2022) that replaced neighbor->request()/requests[] with add_request().
set(MLIP_LAMMPS_NEIGHBOR_API_CHANGE 20220324)

# mlip_lammps_definitions(<lammps src dir> <out var>): compile definitions for pair_mlip.cpp.
function(mlip_lammps_definitions src_dir out)
  mlip_lammps_version(${src_dir} version)
  if(version GREATER_EQUAL MLIP_LAMMPS_NEIGHBOR_API_CHANGE)
    set(new_api 1)
  else()
    set(new_api 0)
  endif()
  set(${out} MLIP_LAMMPS_VERSION=${version} MLIP_LAMMPS_NEW_NEIGHBOR_API=${new_api} PARENT_SCOPE)
endfunction()

# mlip_lammps_test_pair_style(<lammps tree> <lammps build dir> <out var>): where LAMMPS's
# force-style test driver lands: beside the test sources' build dir (29Sep2021) or, in releases
# whose CMake sets CMAKE_RUNTIME_OUTPUT_DIRECTORY (4Feb2025 on), at the top of the build.
function(mlip_lammps_test_pair_style lammps_dir binary_dir out)
  file(STRINGS "${lammps_dir}/cmake/CMakeLists.txt" top REGEX "^set\\(CMAKE_RUNTIME_OUTPUT_DIRECTORY")
  if(top)
    set(${out} "${binary_dir}/test_pair_style" PARENT_SCOPE)
  else()
    set(${out} "${binary_dir}/unittest/force-styles/test_pair_style" PARENT_SCOPE)
  endif()
endfunction()
