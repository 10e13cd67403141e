# mlip_find_torch(): find_package(Torch) from the one LibTorch the user chose, never another one
# that happens to be on the system, and make it usable from every directory of the build.
#
# Which LibTorch, first match wins:
#   -DTorch_DIR=<dir with TorchConfig.cmake>    any LibTorch (a libtorch zip, a wheel's share/cmake/
#                                               Torch, Debian's /usr/lib/x86_64-linux-gnu/cmake/Torch)
#   -DMLIP_TORCH_PYTHON=<python> (or the environment variable of that name): the `torch` package
#                                               that this Python imports, e.g. a venv's PyPI torch
#   default: MLIP_TORCH_VERSION (environment, else cmake/torch-version): a PyPI version, whose venv
#            scripts/install-deps.sh makes in third_party/torch-<version>/, or "debian" for
#            Debian 12's LibTorch 1.13 (libtorch-dev)
#
# PyPI's wheels need three things LibTorch's own config does not do (checked on 2.11 and 2.15):
# its find_library() searches the system before the wheel (so a Debian libtorch.so would win),
# its CUDA targets are directory-scoped, and libtorch_cuda.so's NCCL must be the wheel's, not the
# CUDA toolkit's older one, when linking.
get_filename_component(MLIP_ROOT_FOR_TORCH "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

function(mlip_torch_from_python python)
  if(NOT EXISTS "${python}")
    message(FATAL_ERROR "mlip: MLIP_TORCH_PYTHON=${python} does not exist")
  endif()
  execute_process(
    COMMAND "${python}" -W ignore -c
      "import os, torch; print(torch.__version__); print(os.path.dirname(torch.__file__)); print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE
    ERROR_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    string(REGEX REPLACE ".*\n" "" err "${err}")  # the exception, not "Traceback ..."
    message(FATAL_ERROR "mlip: ${python} cannot import torch (${err}). Run scripts/install-deps.sh, or pass "
                        "-DMLIP_TORCH_PYTHON=<python with torch> or -DTorch_DIR=<LibTorch>/share/cmake/Torch.")
  endif()
  string(REPLACE "\n" ";" out "${out}")
  list(GET out 0 version)
  list(GET out 1 root)
  list(GET out 2 prefix)
  set(MLIP_TORCH_PY_VERSION "${version}" PARENT_SCOPE)
  set(MLIP_TORCH_PREFIX "${root}" PARENT_SCOPE)
  set(Torch_DIR "${prefix}/Torch" CACHE PATH "LibTorch's CMake config" FORCE)
  # Remembered, so that a Torch_DIR the user sets later is told apart from this one.
  set(MLIP_TORCH_DIR_FROM_PYTHON "${prefix}/Torch" CACHE INTERNAL "")
endfunction()

# Links against the wheel's NVIDIA libraries (nvidia/*/lib beside torch/) where LibTorch's CUDA
# libraries need them; at run time libtorch's own RPATH finds them.
function(mlip_torch_wheel_link_dirs target)
  get_filename_component(site "${MLIP_TORCH_ROOT}" DIRECTORY)
  file(GLOB dirs LIST_DIRECTORIES true "${site}/nvidia/*/lib" "${site}/nvidia/cu*/lib")
  foreach(dir IN LISTS dirs)
    target_link_options(${target} INTERFACE "LINKER:-rpath-link,${dir}")
  endforeach()
endfunction()

macro(mlip_find_torch)
  set(MLIP_TORCH_PYTHON "$ENV{MLIP_TORCH_PYTHON}" CACHE FILEPATH "Python whose torch package provides LibTorch")
  if(NOT DEFINED MLIP_TORCH_VERSION)
    if(DEFINED ENV{MLIP_TORCH_VERSION})
      set(MLIP_TORCH_VERSION "$ENV{MLIP_TORCH_VERSION}")
    else()
      file(STRINGS "${MLIP_ROOT_FOR_TORCH}/cmake/torch-version" MLIP_TORCH_VERSION LIMIT_COUNT 1)
    endif()
  endif()
  set(MLIP_TORCH_PREFIX "")   # the LibTorch tree (include/, lib/) when known before find_package
  if(Torch_DIR AND NOT Torch_DIR STREQUAL "${MLIP_TORCH_DIR_FROM_PYTHON}")
    set(MLIP_TORCH_SOURCE "Torch_DIR=${Torch_DIR}")
    set(MLIP_TORCH_PYTHON "" CACHE FILEPATH "Python whose torch package provides LibTorch" FORCE)
    get_filename_component(MLIP_TORCH_PREFIX "${Torch_DIR}/../../.." ABSOLUTE)
  elseif(NOT MLIP_TORCH_PYTHON AND MLIP_TORCH_VERSION STREQUAL "debian")
    set(Torch_DIR "/usr/lib/x86_64-linux-gnu/cmake/Torch" CACHE PATH "LibTorch's CMake config" FORCE)
    set(MLIP_TORCH_DIR_FROM_PYTHON "" CACHE INTERNAL "")
    set(MLIP_TORCH_SOURCE "Debian's LibTorch (MLIP_TORCH_VERSION=debian)")
  else()
    if(NOT MLIP_TORCH_PYTHON)
      set(MLIP_TORCH_PYTHON "${MLIP_ROOT_FOR_TORCH}/third_party/torch-${MLIP_TORCH_VERSION}/bin/python3")
      if(NOT EXISTS "${MLIP_TORCH_PYTHON}")
        message(FATAL_ERROR "mlip: no LibTorch chosen and no ${MLIP_TORCH_PYTHON}. Run scripts/install-deps.sh "
                            "(makes that venv with PyPI's torch==${MLIP_TORCH_VERSION}), or pass "
                            "-DMLIP_TORCH_PYTHON=<python with torch> or -DTorch_DIR=<LibTorch>/share/cmake/Torch.")
      endif()
      set(MLIP_TORCH_PYTHON "${MLIP_TORCH_PYTHON}" CACHE FILEPATH "Python whose torch package provides LibTorch" FORCE)
    endif()
    mlip_torch_from_python("${MLIP_TORCH_PYTHON}")
    set(MLIP_TORCH_SOURCE "torch ${MLIP_TORCH_PY_VERSION} of ${MLIP_TORCH_PYTHON}")
  endif()
  if(MLIP_TORCH_PREFIX)
    # Before the system's library directories, where another libtorch.so may be.
    list(PREPEND CMAKE_PREFIX_PATH "${MLIP_TORCH_PREFIX}")
  endif()
  # Switched to another LibTorch: forget where the previous one's libraries were found.
  if(DEFINED MLIP_TORCH_CONFIG_USED AND NOT MLIP_TORCH_CONFIG_USED STREQUAL Torch_DIR)
    get_cmake_property(cached CACHE_VARIABLES)
    foreach(var IN LISTS cached)
      if(var MATCHES "_LIBRARY$" AND "${${var}}" MATCHES "/lib(torch|c10|caffe2|kineto|shm)[^/]*$|-NOTFOUND$")
        unset(${var} CACHE)
      endif()
    endforeach()
    message(STATUS "mlip: LibTorch changed (was ${MLIP_TORCH_CONFIG_USED})")
  endif()
  set(MLIP_TORCH_CONFIG_USED "${Torch_DIR}" CACHE INTERNAL "")
  # The toolkit for a CUDA build of LibTorch (PyPI's wheels are); harmless for CPU builds.
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  get_property(imported_before_torch DIRECTORY PROPERTY IMPORTED_TARGETS)
  find_package(Torch REQUIRED)

  # Never a LibTorch other than the chosen one (cached results of an earlier configure included):
  # libtorch.so must lie inside the tree whose config was read.
  get_filename_component(found "${TORCH_LIBRARY}" REALPATH)
  get_filename_component(tree "${TORCH_INSTALL_PREFIX}" REALPATH)
  string(FIND "${found}" "${tree}/" at)
  if(NOT at EQUAL 0)
    message(FATAL_ERROR "mlip: ${MLIP_TORCH_SOURCE} (${tree}) was asked for, but CMake found ${TORCH_LIBRARY}. "
                        "If a cached TORCH_LIBRARY is stale, configure a new build directory.")
  endif()
  set(MLIP_TORCH_ROOT "${TORCH_INSTALL_PREFIX}" CACHE INTERNAL "LibTorch install prefix")

  # Torch's imported targets are directory-scoped; the consumers of mlip::model live elsewhere.
  get_property(imported DIRECTORY PROPERTY IMPORTED_TARGETS)
  foreach(t IN LISTS imported)
    get_target_property(global ${t} IMPORTED_GLOBAL)
    if(NOT global AND NOT t IN_LIST imported_before_torch)
      set_target_properties(${t} PROPERTIES IMPORTED_GLOBAL TRUE)
    endif()
  endforeach()
  set(MLIP_TORCH_CUDA OFF)
  if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
    set(MLIP_TORCH_CUDA ON)
  endif()
  set(MLIP_LIBTORCH_VERSION "${Torch_VERSION}" CACHE INTERNAL "LibTorch version found")
  set(MLIP_LIBTORCH_HAS_CUDA ${MLIP_TORCH_CUDA} CACHE INTERNAL "LibTorch is a CUDA build")
  if(MLIP_TORCH_CUDA AND NOT MLIP_LINK_TORCH_CUDA)
    set(MLIP_TORCH_CUDA "in LibTorch, loaded at run time for a GPU device (mlip/model/device.h)")
  endif()
  message(STATUS "mlip: LibTorch ${Torch_VERSION} from ${MLIP_TORCH_SOURCE} (${TORCH_LIBRARY}; CUDA: ${MLIP_TORCH_CUDA})")
endmacro()

# mlip_link_torch(<target>): the target's users link LibTorch's CPU libraries, with C++ runtime
# symbols bound to libstdc++.
#
# CPU only: PyPI's libtorch.so is a stub that pulls in libtorch_cuda.so and the CUDA, cuDNN and
# NCCL libraries, which cost every process resident memory even when nothing runs on a GPU
# (benchmarks/bench_pair.sh, se_e2_a water, 1152 atoms, 1 rank: 559 MB peak with them, 224 MB
# without; README "Speed and memory across the stacks"). MLIP_LINK_TORCH_CUDA=ON links them.
#
# libstdc++ first: some wheels' libtorch.so and libtorch_cpu.so (2.11) export their own copies of
# libstdc++ functions (std::filesystem::remove_all, ...) that jump to address 0 when called from
# outside; listing libstdc++ before LibTorch among the needed libraries makes both the link-time
# and the run-time lookup find libstdc++'s definitions first.
option(MLIP_LINK_TORCH_CUDA "Link LibTorch's CUDA libraries (a CUDA build of LibTorch)" OFF)
function(mlip_link_torch target)
  target_link_options(${target} INTERFACE "LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")
  if(TARGET torch_cpu_library AND NOT MLIP_LINK_TORCH_CUDA)
    # What the `torch` target would have given: headers, flags and the C++ standard (LibTorch
    # 2.15 asks its users for C++20).
    target_link_libraries(${target} PUBLIC torch_cpu_library)
    target_include_directories(${target} SYSTEM PUBLIC ${TORCH_INCLUDE_DIRS})
    target_compile_options(${target} PUBLIC ${TORCH_CXX_FLAGS})
    get_target_property(features torch INTERFACE_COMPILE_FEATURES)
    if(features)
      target_compile_features(${target} PUBLIC ${features})
    endif()
  else()
    target_link_libraries(${target} PUBLIC ${TORCH_LIBRARIES})
  endif()
  if(MLIP_TORCH_ROOT AND (MLIP_LINK_TORCH_CUDA OR NOT TARGET torch_cpu_library))
    mlip_torch_wheel_link_dirs(${target})  # only libtorch_cuda.so needs them
  endif()
endfunction()
