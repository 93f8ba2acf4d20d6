#pragma once
// The main of a one-process tool (avtrain-bench, avtrain-gemm-peak): MPI is started for the
// libraries that need it, and an error becomes one line "NAME: message" and exit status 1.
#include <mpi.h>

#include <boost/program_options.hpp>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

#include "core/error.hpp"

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

// Reads the tool's command line into the options' fields; prints the help and returns false when
// --help was given. A bad option throws Error naming it.
inline bool parse_tool_options(const boost::program_options::options_description& options, int argc, char** argv) {
  namespace po = boost::program_options;
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, options), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw Error(std::string("command line: ") + e.what());
  }
  if (!vm.count("help")) return true;
  std::cout << options;
  return false;
}

}  // namespace avtrain
