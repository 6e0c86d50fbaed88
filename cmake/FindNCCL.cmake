# FindNCCL — locates NCCL headers and library.
# Looks under NCCL_ROOT, the CUDA toolkit and the usual system paths.
# Defines NCCL_FOUND, NCCL_VERSION and the imported target NCCL::nccl.
set(_nccl_hints ${NCCL_ROOT} $ENV{NCCL_ROOT} ${CUDAToolkit_LIBRARY_ROOT} $ENV{CUDA_HOME} /usr/local/cuda)
find_path(NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
find_library(NCCL_LIBRARY nccl HINTS ${_nccl_hints} PATH_SUFFIXES lib64 lib lib/x86_64-linux-gnu)
if(NCCL_INCLUDE_DIR)
  file(READ "${NCCL_INCLUDE_DIR}/nccl.h" _nccl_h)
  string(REGEX MATCH "define NCCL_MAJOR ([0-9]+)" _ "${_nccl_h}")
  set(_major ${CMAKE_MATCH_1})
  string(REGEX MATCH "define NCCL_MINOR ([0-9]+)" _ "${_nccl_h}")
  set(_minor ${CMAKE_MATCH_1})
  string(REGEX MATCH "define NCCL_PATCH ([0-9]+)" _ "${_nccl_h}")
  set(NCCL_VERSION "${_major}.${_minor}.${CMAKE_MATCH_1}")
endif()
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(NCCL REQUIRED_VARS NCCL_LIBRARY NCCL_INCLUDE_DIR VERSION_VAR NCCL_VERSION)
if(NCCL_FOUND AND NOT TARGET NCCL::nccl)
  add_library(NCCL::nccl UNKNOWN IMPORTED)
  set_target_properties(NCCL::nccl PROPERTIES IMPORTED_LOCATION "${NCCL_LIBRARY}"
                        INTERFACE_INCLUDE_DIRECTORIES "${NCCL_INCLUDE_DIR}")
endif()
mark_as_advanced(NCCL_INCLUDE_DIR NCCL_LIBRARY)
