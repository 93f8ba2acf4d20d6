# avtrain::blas: OpenBLAS through CBLAS. The OpenMP build of OpenBLAS is preferred so that BLAS
# and avtrain's own OpenMP loops share one thread pool instead of two pools fighting for cores.
set(_arch_dir ${CMAKE_LIBRARY_ARCHITECTURE})
find_library(AVTRAIN_OPENBLAS_OPENMP NAMES openblas
             PATHS /usr/lib/${_arch_dir}/openblas-openmp NO_DEFAULT_PATH)
find_path(AVTRAIN_CBLAS_OPENMP_INCLUDE NAMES cblas.h
          PATHS /usr/include/${_arch_dir}/openblas-openmp NO_DEFAULT_PATH)
add_library(avtrain::blas INTERFACE IMPORTED)
if(AVTRAIN_OPENBLAS_OPENMP AND AVTRAIN_CBLAS_OPENMP_INCLUDE)
  message(STATUS "avtrain: BLAS = OpenBLAS (OpenMP) ${AVTRAIN_OPENBLAS_OPENMP}")
  target_link_libraries(avtrain::blas INTERFACE ${AVTRAIN_OPENBLAS_OPENMP})
  target_include_directories(avtrain::blas INTERFACE ${AVTRAIN_CBLAS_OPENMP_INCLUDE})
  set(AVTRAIN_BLAS_NAME "OpenBLAS (OpenMP)")
else()
  set(BLA_VENDOR OpenBLAS)
  find_package(BLAS REQUIRED)
  find_path(AVTRAIN_CBLAS_INCLUDE NAMES cblas.h PATH_SUFFIXES openblas openblas-pthread REQUIRED)
  message(STATUS "avtrain: BLAS = ${BLAS_LIBRARIES} (OpenBLAS built for OpenMP not found; threads may contend)")
  target_link_libraries(avtrain::blas INTERFACE BLAS::BLAS)
  target_include_directories(avtrain::blas INTERFACE ${AVTRAIN_CBLAS_INCLUDE})
  set(AVTRAIN_BLAS_NAME "OpenBLAS")
endif()
