// avtrain-gemm-peak: the rate of a large square matrix product on a backend, in a type - the peak a
// model's FLOP utilisation is read against (validation/gpu-check.sh uses the bf16 rate of the GPU).
//   avtrain-gemm-peak [--device cpu|cuda] [--dtype fp32|fp16|bf16] [--n 8192] [--repeats 10]
#include <mpi.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <vector>

#include "app/backend_choice.hpp"
#include "app/options.hpp"
#include "app/tool_main.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "precision/precision_policy.hpp"

namespace po = boost::program_options;

namespace {

// A device (or host) buffer of the backend, freed on scope exit.
struct Memory {
  avtrain::Backend& be;
  void* p;
  Memory(avtrain::Backend& b, std::size_t bytes) : be(b), p(b.allocate(bytes)) {}
  ~Memory() { be.deallocate(p); }
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
};

int run(int argc, char** argv) {
  std::string device = "cpu", dtype = "bf16";
  int n = 4096, repeats = 10, threads = 2;
  po::options_description opts("avtrain-gemm-peak [--device cpu|cuda] [--dtype fp32|fp16|bf16] [--n N] [--repeats R]");
  opts.add_options()("help,h", "print this help")("device", po::value(&device)->default_value(device), "backend")(
      "dtype", po::value(&dtype)->default_value(dtype), "operand type (fp32 accumulation)")(
      "n", po::value(&n)->default_value(n), "M = N = K")("repeats", po::value(&repeats)->default_value(repeats),
                                                          "timed products")(
      "threads", po::value(&threads)->default_value(threads), "CPU threads");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, opts), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    throw avtrain::Error(std::string("command line: ") + e.what());
  }
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  avtrain::require(n >= 1 && repeats >= 1, "--n and --repeats must be >= 1");
  avtrain::ParsedOptions parsed = avtrain::parse_options({"--device", device, "--threads", std::to_string(threads)});
  auto be = avtrain::make_backend(parsed.config, {});
  const avtrain::DType type = avtrain::parse_dtype(dtype, "--dtype");
  const std::size_t count = std::size_t(n) * n, element = avtrain::dtype_size(type);

  // Operands: small dyadic values, exact in every type.
  std::vector<float> values(count);
  for (std::size_t i = 0; i < count; ++i) values[i] = float(int(i % 7) - 3) * 0.125f;
  std::vector<std::uint16_t> packed(count);
  if (type == avtrain::DType::f16) avtrain::floats_to_half(values.data(), packed.data(), count);
  if (type == avtrain::DType::bf16) avtrain::floats_to_bf16(values.data(), packed.data(), count);
  const void* host = type == avtrain::DType::f32 ? static_cast<const void*>(values.data()) : packed.data();
  Memory a(*be, count * element), b(*be, count * element), c(*be, count * sizeof(float));
  be->upload(a.p, host, count * element);
  be->upload(b.p, host, count * element);
  const avtrain::Operand A{a.p, type}, B{b.p, type};
  auto product = [&] {
    be->gemm(type, avtrain::Trans::no, avtrain::Trans::no, n, n, n, 1.0f, A, n, B, n, 0.0f, static_cast<float*>(c.p), n);
  };
  product();  // warm-up: handles, kernels, clocks
  be->synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < repeats; ++r) product();
  be->synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / repeats;
  const double tflops = 2.0 * n * double(n) * n / seconds / 1e12;
  std::printf("avtrain-gemm-peak: %s %s %d^3: %.3f ms per product, %.2f TFLOP/s (%s)\n", be->name().c_str(),
              dtype.c_str(), n, seconds * 1e3, tflops, be->gemm_engine(type).c_str());
  std::printf("{\"device\": \"%s\", \"dtype\": \"%s\", \"n\": %d, \"tflops\": %.4f}\n", be->name().c_str(), dtype.c_str(),
              n, tflops);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return avtrain::run_tool("avtrain-gemm-peak", argc, argv, run); }
