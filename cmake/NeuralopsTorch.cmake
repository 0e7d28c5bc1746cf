# Locates libtorch and defines the imported target neuralops::torch (headers and libraries).
#
# Torch's own TorchConfig.cmake is not used: it enables the CUDA language and requires the full
# CUDA toolkit (nvrtc, cuBLAS headers) even for code, like neuralops, that launches kernels through
# the driver API only. This module needs just a torch installation: the pip package or a libtorch
# archive, found through CMAKE_PREFIX_PATH (torch.utils.cmake_prefix_path) or Torch_DIR, the same
# hints find_package(Torch) takes. Used by CMakeLists.txt and by the installed neuralopsConfig.cmake.

if(TARGET neuralops::torch)
  return()
endif()

find_path(NEURALOPS_TORCH_CONFIG_DIR TorchConfigVersion.cmake
  HINTS "${Torch_DIR}" ENV Torch_DIR
  PATH_SUFFIXES share/cmake/Torch Torch cmake/Torch
  DOC "Directory holding torch's TorchConfigVersion.cmake")
if(NOT NEURALOPS_TORCH_CONFIG_DIR)
  message(FATAL_ERROR
    "neuralops: libtorch not found. Pass -DCMAKE_PREFIX_PATH=$(python -c 'import torch; "
    "print(torch.utils.cmake_prefix_path)') or -DTorch_DIR=<libtorch>/share/cmake/Torch.")
endif()
get_filename_component(NEURALOPS_TORCH_ROOT "${NEURALOPS_TORCH_CONFIG_DIR}/../../.." ABSOLUTE)
include("${NEURALOPS_TORCH_CONFIG_DIR}/TorchConfigVersion.cmake")
set(NEURALOPS_TORCH_VERSION "${PACKAGE_VERSION}")

# Code using libtorch must be compiled with the C++ standard torch was built with: c10's classes
# differ between standards, and a mismatch crashes the process when an exception crosses into torch
# (seen with torch 2.11, built as C++17, and an extension built as C++20). TorchConfig.cmake records it.
file(STRINGS "${NEURALOPS_TORCH_CONFIG_DIR}/TorchConfig.cmake" _neuralops_std REGEX "CXX_STANDARD [0-9]+")
if(_neuralops_std MATCHES "CXX_STANDARD ([0-9]+)")
  set(NEURALOPS_TORCH_CXX_STANDARD "${CMAKE_MATCH_1}")
else()
  set(NEURALOPS_TORCH_CXX_STANDARD 17)
endif()

# --no-as-needed: nothing references libtorch_cuda's symbols directly, but loading it is what
# registers torch's CUDA backend in a C++ program.
set(_neuralops_torch_libs "-Wl,--no-as-needed")
foreach(_lib torch torch_cpu torch_cuda c10 c10_cuda)
  find_library(NEURALOPS_TORCH_LIB_${_lib} ${_lib} PATHS "${NEURALOPS_TORCH_ROOT}/lib" NO_DEFAULT_PATH)
  if(NOT NEURALOPS_TORCH_LIB_${_lib})
    message(FATAL_ERROR "neuralops: lib${_lib}.so not found in ${NEURALOPS_TORCH_ROOT}/lib; "
      "neuralops needs a CUDA build of PyTorch")
  endif()
  list(APPEND _neuralops_torch_libs "${NEURALOPS_TORCH_LIB_${_lib}}")
endforeach()

add_library(neuralops::torch INTERFACE IMPORTED)
set_target_properties(neuralops::torch PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES
    "${NEURALOPS_TORCH_ROOT}/include;${NEURALOPS_TORCH_ROOT}/include/torch/csrc/api/include"
  INTERFACE_LINK_LIBRARIES "${_neuralops_torch_libs}"
  INTERFACE_COMPILE_FEATURES cxx_std_${NEURALOPS_TORCH_CXX_STANDARD})
message(STATUS "neuralops: torch ${NEURALOPS_TORCH_VERSION} (C++${NEURALOPS_TORCH_CXX_STANDARD}) at ${NEURALOPS_TORCH_ROOT}")
