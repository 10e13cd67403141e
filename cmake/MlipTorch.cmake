# mlip_find_torch(): find_package(Torch) from the one LibTorch the user chose, never another one
# that happens to be on the system, and make it usable from every directory of the build.
#
# Which LibTorch, first match wins:
#   -DTorch_DIR=<dir with TorchConfig.cmake>    any LibTorch (a libtorch zip, Debian's 1.13, ...)
#   -DMLIP_TORCH_PYTHON=<python> (or the environment variable of that name): the `torch` package
#                                               that this Python imports, e.g. a venv's PyPI torch
#   default: the venv that scripts/install-deps.sh makes, third_party/torch-<version>/, with the
#            version pinned in cmake/torch-version (MLIP_TORCH_VERSION overrides it)
#
# PyPI's wheels need three things LibTorch's own config does not do (checked on 2.11 and 2.15):
# its find_library() searches the system before the wheel (so a Debian libtorch.so would win),
# its CUDA targets are directory-scoped, and libtorch_cuda.so's NCCL must be the wheel's, not the
# CUDA toolkit's older one, when linking.
get_filename_component(MLIP_ROOT_FOR_TORCH "${CMAKE_CURRENT_LIST_DIR}/.." ABSOLUTE)

function(mlip_torch_from_python python)
  execute_process(
    COMMAND "${python}" -c
      "import os, torch; print(torch.__version__); print(os.path.dirname(torch.__file__)); print(torch.utils.cmake_prefix_path)"
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc OUTPUT_STRIP_TRAILING_WHITESPACE)
  if(NOT rc EQUAL 0)
    string(REGEX REPLACE "\n.*" "" err "${err}")
    message(FATAL_ERROR "mlip: ${python} cannot import torch (${err}). Run scripts/install-deps.sh, or pass "
                        "-DMLIP_TORCH_PYTHON=<python with torch> or -DTorch_DIR=<LibTorch>/share/cmake/Torch.")
  endif()
  string(REPLACE "\n" ";" out "${out}")
  list(GET out 0 version)
  list(GET out 1 root)
  list(GET out 2 prefix)
  set(MLIP_TORCH_ROOT "${root}" PARENT_SCOPE)
  set(MLIP_TORCH_PY_VERSION "${version}" PARENT_SCOPE)
  set(Torch_DIR "${prefix}/Torch" CACHE PATH "LibTorch's CMake config (from ${python})" FORCE)
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
  set(MLIP_TORCH_ROOT "")
  if(Torch_DIR AND NOT MLIP_TORCH_PYTHON)
    set(MLIP_TORCH_SOURCE "Torch_DIR=${Torch_DIR}")
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
    # Before the system's library directories, where another libtorch.so may be.
    list(PREPEND CMAKE_PREFIX_PATH "${MLIP_TORCH_ROOT}" "${MLIP_TORCH_ROOT}/share/cmake")
  endif()
  # The toolkit for a CUDA build of LibTorch (PyPI's wheels are); harmless for CPU builds.
  if(NOT DEFINED CUDAToolkit_ROOT AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  find_package(Torch REQUIRED)

  # Never a LibTorch other than the chosen one (cached results of an earlier configure included).
  get_filename_component(found_dir "${TORCH_LIBRARY}" DIRECTORY)
  get_filename_component(found_dir "${found_dir}" REALPATH)
  get_filename_component(expect_dir "${TORCH_INSTALL_PREFIX}/lib" REALPATH)
  if(MLIP_TORCH_ROOT)
    get_filename_component(expect_dir "${MLIP_TORCH_ROOT}/lib" REALPATH)
  endif()
  if(NOT found_dir STREQUAL expect_dir)
    message(FATAL_ERROR "mlip: ${MLIP_TORCH_SOURCE} was asked for, but CMake found ${TORCH_LIBRARY}; "
                        "remove the build directory's CMakeCache.txt and configure again.")
  endif()

  # Torch's imported targets are directory-scoped; the consumers of mlip::model live elsewhere.
  foreach(t torch torch_cpu torch_cuda torch_library c10 c10_cuda protobuf::libprotobuf torch::nvtoolsext
            torch::cudart torch::cufft torch::curand torch::cublas torch::cudnn torch::nvrtc)
    if(TARGET ${t})
      get_target_property(imported ${t} IMPORTED)
      get_target_property(global ${t} IMPORTED_GLOBAL)
      if(imported AND NOT global)
        set_target_properties(${t} PROPERTIES IMPORTED_GLOBAL TRUE)
      endif()
    endif()
  endforeach()
  set(MLIP_TORCH_CUDA OFF)
  if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES)
    set(MLIP_TORCH_CUDA ON)
  endif()
  set(MLIP_LIBTORCH_VERSION "${Torch_VERSION}" CACHE INTERNAL "LibTorch version found")
  message(STATUS "mlip: LibTorch ${Torch_VERSION} from ${MLIP_TORCH_SOURCE} (${TORCH_LIBRARY}; CUDA: ${MLIP_TORCH_CUDA})")
endmacro()

# mlip_link_torch(<target>): the target's users link LibTorch, with C++ runtime symbols bound to
# libstdc++. Some wheels' libtorch.so (2.11) export their own copies of libstdc++ functions
# (std::filesystem::remove_all, ...) that jump to address 0 when called from outside; listing
# libstdc++ before LibTorch among the needed libraries makes both the link-time and the run-time
# lookup find libstdc++'s definitions first.
function(mlip_link_torch target)
  target_link_options(${target} INTERFACE "LINKER:--push-state,--no-as-needed" "-lstdc++" "LINKER:--pop-state")
  target_link_libraries(${target} PUBLIC ${TORCH_LIBRARIES})
  if(MLIP_TORCH_ROOT)
    mlip_torch_wheel_link_dirs(${target})
  endif()
endfunction()
