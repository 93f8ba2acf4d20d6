#include "cudnn_library.hpp"

#include <dlfcn.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <vector>

namespace avtrain::cuda {

namespace {

constexpr const char* kSoname = "libcudnn.so.9";

// The site-packages (and user site) folders of `python`, one per line; none where it is not there.
std::vector<std::string> site_packages(const std::string& python) {
  const std::string command = "'" + python +
                              "' -c 'import site,sys; print(\"\\n\".join(site.getsitepackages()+[site.getusersitepackages()]))'"
                              " 2>/dev/null";
  std::vector<std::string> folders;
  std::unique_ptr<FILE, int (*)(FILE*)> pipe(popen(command.c_str(), "r"), pclose);
  if (!pipe) return folders;
  std::array<char, 4096> line{};
  while (std::fgets(line.data(), int(line.size()), pipe.get())) {
    std::string folder(line.data());
    while (!folder.empty() && (folder.back() == '\n' || folder.back() == '\r')) folder.pop_back();
    if (!folder.empty()) folders.push_back(folder);
  }
  return folders;
}

// dlopen's message, or a plain one.
std::string dl_problem() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

// The library's version through its own cudnnGetVersion (0 where the symbol is missing).
std::size_t version_of(void* handle) {
  using GetVersion = std::size_t (*)();
  auto get = reinterpret_cast<GetVersion>(dlsym(handle, "cudnnGetVersion"));
  return get ? get() : 0;
}

CudnnLibrary opened(void* handle, std::string path) {
  CudnnLibrary lib;
  lib.handle = handle;
  lib.path = std::move(path);
  lib.version = version_of(handle);
  if (lib.version / 10000 != 9) {
    lib.problem = lib.path + " is not cuDNN 9 (cudnnGetVersion: " + std::to_string(lib.version) + ")";
    dlclose(handle);
    lib.handle = nullptr;
  }
  return lib;
}

}  // namespace

std::string cudnn_version_name(std::size_t v) {
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

CudnnLibrary find_cudnn_library() {
  if (const char* file = std::getenv("AVTRAIN_CUDNN_LIB"); file && *file) {
    dlerror();
    if (void* h = dlopen(file, RTLD_NOW | RTLD_LOCAL)) return opened(h, file);
    CudnnLibrary none;
    none.problem = std::string("AVTRAIN_CUDNN_LIB=") + file + " does not open: " + dl_problem();
    return none;
  }
  dlerror();
  if (void* h = dlopen(kSoname, RTLD_NOW | RTLD_LOCAL)) {
    // The file the loader chose, for the log.
    std::string path = kSoname;
    if (void* sym = dlsym(h, "cudnnGetVersion")) {
      Dl_info info{};
      if (dladdr(sym, &info) && info.dli_fname) path = info.dli_fname;
    }
    return opened(h, path);
  }
  const std::string loader = dl_problem();
  const char* python_env = std::getenv("AVTRAIN_PYTHON");
  const std::string python = python_env && *python_env ? python_env : "python3";
  std::string looked;
  for (const std::string& folder : site_packages(python)) {
    const std::filesystem::path file = std::filesystem::path(folder) / "nvidia" / "cudnn" / "lib" / kSoname;
    looked += (looked.empty() ? "" : ", ") + file.parent_path().string();
    std::error_code ec;
    if (!std::filesystem::exists(file, ec)) continue;
    dlerror();
    if (void* h = dlopen(file.c_str(), RTLD_NOW | RTLD_LOCAL)) return opened(h, file.string());
    CudnnLibrary none;
    none.problem = file.string() + " does not open: " + dl_problem();
    return none;
  }
  CudnnLibrary none;
  none.problem = std::string(kSoname) + " not found (the loader: " + loader + "; " + python + "'s site-packages: " +
                 (looked.empty() ? "no python3 or none" : looked) +
                 "); set AVTRAIN_CUDNN_LIB to the file";
  return none;
}

const CudnnLibrary& cudnn_library() {
  static const CudnnLibrary lib = find_cudnn_library();
  return lib;
}

}  // namespace avtrain::cuda
