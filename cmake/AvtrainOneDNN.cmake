# avtrain::onednn: oneDNN (Debian 12: libdnnl-dev, oneDNN 2.6) for bf16 matrix products on CPUs with
# bf16 matrix units. Sets AVTRAIN_HAVE_ONEDNN (ON/OFF) and AVTRAIN_ONEDNN_VERSION; optional either way.
# src/backend/cpu/onednn_gemm.cpp uses the oneDNN 2.x API (matmul::desc, output scales), which 3.0
# removed, so a 3.x install is reported and left unused.
include_guard(GLOBAL)
option(AVTRAIN_ONEDNN "Run bf16 matrix products through oneDNN when it is found" ON)
set(AVTRAIN_HAVE_ONEDNN OFF)
set(AVTRAIN_ONEDNN_VERSION "")

if(AVTRAIN_ONEDNN)
  # Debian's config package (cmake/dnnl/dnnl-config.cmake) runs find_package(OpenCL REQUIRED),
  # because the library was built with an OpenCL GPU runtime: without the OpenCL headers and
  # libOpenCL.so (ocl-icd-opencl-dev, only *recommended* by libdnnl-dev) that would abort the whole
  # configure. So the config package is tried only when both are there; else the library is found
  # directly (the CPU path needs neither OpenCL header nor link: libdnnl.so pulls libOpenCL.so.1
  # itself at run time).
  find_path(AVTRAIN_OPENCL_HEADER NAMES CL/cl.h)
  find_library(AVTRAIN_OPENCL_LIBRARY NAMES OpenCL)
  mark_as_advanced(AVTRAIN_OPENCL_HEADER AVTRAIN_OPENCL_LIBRARY)
  if(AVTRAIN_OPENCL_HEADER AND AVTRAIN_OPENCL_LIBRARY)
    find_package(dnnl CONFIG QUIET)
  endif()

  set(_avtrain_dnnl_link "")
  if(TARGET DNNL::dnnl)
    set(_avtrain_dnnl_link DNNL::dnnl)
    set(_avtrain_dnnl_from "config package ${dnnl_DIR}")
    set(AVTRAIN_ONEDNN_VERSION "${dnnl_VERSION}")
  else()
    find_path(AVTRAIN_DNNL_INCLUDE NAMES oneapi/dnnl/dnnl.hpp)
    find_library(AVTRAIN_DNNL_LIBRARY NAMES dnnl)
    mark_as_advanced(AVTRAIN_DNNL_INCLUDE AVTRAIN_DNNL_LIBRARY)
    if(AVTRAIN_DNNL_INCLUDE AND AVTRAIN_DNNL_LIBRARY)
      set(_avtrain_dnnl_link ${AVTRAIN_DNNL_LIBRARY})
      set(_avtrain_dnnl_from "${AVTRAIN_DNNL_LIBRARY}")
      file(STRINGS ${AVTRAIN_DNNL_INCLUDE}/oneapi/dnnl/dnnl_version.h _avtrain_dnnl_v
           REGEX "^#define DNNL_VERSION_(MAJOR|MINOR|PATCH) +[0-9]+")
      set(_avtrain_parts "")
      foreach(_part MAJOR MINOR PATCH)
        string(REGEX MATCH "DNNL_VERSION_${_part} +([0-9]+)" _m "${_avtrain_dnnl_v}")
        list(APPEND _avtrain_parts "${CMAKE_MATCH_1}")
      endforeach()
      string(JOIN "." AVTRAIN_ONEDNN_VERSION ${_avtrain_parts})
    endif()
  endif()

  if(NOT _avtrain_dnnl_link)
    message(STATUS "avtrain: oneDNN not found (libdnnl-dev): bf16 products widen to fp32 for OpenBLAS")
  elseif(NOT AVTRAIN_ONEDNN_VERSION MATCHES "^2\\.")
    message(STATUS "avtrain: oneDNN ${AVTRAIN_ONEDNN_VERSION} found (${_avtrain_dnnl_from}), but avtrain "
                   "uses the 2.x API: not used; bf16 products widen to fp32 for OpenBLAS")
  else()
    set(AVTRAIN_HAVE_ONEDNN ON)
    add_library(avtrain::onednn INTERFACE IMPORTED)
    target_link_libraries(avtrain::onednn INTERFACE ${_avtrain_dnnl_link})
    if(NOT TARGET DNNL::dnnl)
      target_include_directories(avtrain::onednn INTERFACE ${AVTRAIN_DNNL_INCLUDE})
    endif()
    message(STATUS "avtrain: oneDNN ${AVTRAIN_ONEDNN_VERSION} (${_avtrain_dnnl_from}): bf16 products on "
                   "it where the CPU has AVX512-BF16 or AMX")
  endif()
  unset(_avtrain_dnnl_link)
  unset(_avtrain_dnnl_from)
else()
  message(STATUS "avtrain: oneDNN off (AVTRAIN_ONEDNN=OFF): bf16 products widen to fp32 for OpenBLAS")
endif()
