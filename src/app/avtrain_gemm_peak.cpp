// avtrain-gemm-peak: the rate of a large square matrix product on a backend, in a type - the peak a
// model's FLOP utilisation is read against (validation/gpu-check.sh uses the bf16 rate of the GPU).
//   avtrain-gemm-peak [--device cpu|cuda] [--dtype fp32|fp16|bf16] [--n 8192] [--repeats 10]
#include <mpi.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
#include <vector>

#include "app/backend_choice.hpp"
#include "app/gemm_rate.hpp"
#include "app/options.hpp"
#include "app/tool_main.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

namespace po = boost::program_options;

namespace {

int run(int argc, char** argv) {
  std::string device = "cpu", dtype = "bf16";
  int n = 4096, repeats = 10, threads = 2;
  po::options_description opts("avtrain-gemm-peak [--device cpu|cuda] [--dtype fp32|fp16|bf16] [--n N] [--repeats R]");
  opts.add_options()("help,h", "print this help")("device", po::value(&device)->default_value(device), "backend")(
      "dtype", po::value(&dtype)->default_value(dtype), "operand type (fp32 accumulation)")(
      "n", po::value(&n)->default_value(n), "M = N = K")("repeats", po::value(&repeats)->default_value(repeats),
                                                          "timed products")(
      "threads", po::value(&threads)->default_value(threads), "CPU threads");
  if (!avtrain::parse_tool_options(opts, argc, argv)) return 0;
  avtrain::require(n >= 1 && repeats >= 1, "--n and --repeats must be >= 1");
  avtrain::ParsedOptions parsed = avtrain::parse_options({"--device", device, "--threads", std::to_string(threads)});
  auto be = avtrain::make_backend(parsed.config, {});
  const std::optional<avtrain::DType> parsed_type = avtrain::parse_enum<avtrain::DType>(dtype);
  avtrain::require(parsed_type.has_value(),
                   "--dtype: '" + dtype + "' is not one of " + avtrain::enum_words<avtrain::DType>());
  const avtrain::DType type = *parsed_type;
  const double tflops = avtrain::gemm_rate_gflops(*be, type, n, repeats) / 1e3;
  const double seconds = 2.0 * n * double(n) * n / (tflops * 1e12);
  std::printf("avtrain-gemm-peak: %s %s %d^3: %.3f ms per product (best of the timed), %.2f TFLOP/s (%s)\n", be->name().c_str(),
              dtype.c_str(), n, seconds * 1e3, tflops, be->gemm_engine(type).c_str());
  std::printf("{\"device\": \"%s\", \"dtype\": \"%s\", \"n\": %d, \"tflops\": %.4f}\n", be->name().c_str(), dtype.c_str(),
              n, tflops);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return avtrain::run_tool("avtrain-gemm-peak", argc, argv, run); }
