#pragma once
// Where libcudnn comes from: nothing links it (it is 500 MB and not on every node); the cuDNN
// attention engine (cudnn_attention.hpp) opens it at run time, from the first place that has it:
//   1. AVTRAIN_CUDNN_LIB, when set: that file (a path), and only it;
//   2. libcudnn.so.9 through the loader's own search (LD_LIBRARY_PATH, RPATH, ldconfig's cache);
//   3. nvidia/cudnn/lib/libcudnn.so.9 in the site-packages of a python3 on PATH (PyTorch's wheels
//      carry it: the GPU nodes' usual copy), or of $AVTRAIN_PYTHON.
// A node without it runs the own flash kernel; `problem` then says so in one line.
#include <string>

namespace avtrain::cuda {

struct CudnnLibrary {
  void* handle = nullptr;  // dlopen's, kept open for the process
  std::string path;        // where it was found (the file, or the soname the loader resolved)
  std::size_t version = 0; // cudnnGetVersion(): 9.28.1 is 92801
  std::string problem;     // why there is none: one line naming every place looked in
};

// Opens libcudnn once per process (later calls return the first result).
const CudnnLibrary& cudnn_library();

// The search itself, without the once-per-process cache (the loader's test).
CudnnLibrary find_cudnn_library();

// "9.28.1" from 92801.
std::string cudnn_version_name(std::size_t version);

}  // namespace avtrain::cuda
