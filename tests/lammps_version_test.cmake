# cmake -P: the compile definitions that select LAMMPS's neighbour-request API in pair_mlip.cpp,
# from version.h dates on either side of the change (24Mar2022).
include(${CMAKE_CURRENT_LIST_DIR}/../cmake/LammpsVersion.cmake)
set(dir ${CMAKE_CURRENT_BINARY_DIR}/lammps_version_test)
foreach(case "29 Sep 2021:20210929:0" "17 Feb 2022:20220217:0" "24 Mar 2022:20220324:1"
             "2 Aug 2023:20230802:1" "7 Feb 2024:20240207:1")
  string(REPLACE ":" ";" parts "${case}")
  list(GET parts 0 date)
  list(GET parts 1 version)
  list(GET parts 2 api)
  file(WRITE ${dir}/version.h "#define LAMMPS_VERSION \"${date}\"\n")
  mlip_lammps_definitions(${dir} defs)
  set(expected "MLIP_LAMMPS_VERSION=${version};MLIP_LAMMPS_NEW_NEIGHBOR_API=${api}")
  if(NOT defs STREQUAL expected)
    message(FATAL_ERROR "'${date}' gives '${defs}', expected '${expected}'")
  endif()
  message(STATUS "${date}: ${defs}")
endforeach()
file(REMOVE_RECURSE ${dir})
