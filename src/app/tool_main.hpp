#pragma once
// The main of a one-process tool (avtrain-bench, avtrain-gemm-peak): MPI is started for the
// libraries that need it, and an error becomes one line "NAME: message" and exit status 1.
#include <mpi.h>

#include <cstdio>
#include <exception>

namespace avtrain {

inline int run_tool(const char* name, int argc, char** argv, int (*run)(int, char**)) {
  MPI_Init(&argc, &argv);
  int code = 0;
  try {
    code = run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", name, e.what());
    code = 1;
  }
  MPI_Finalize();
  return code;
}

}  // namespace avtrain
