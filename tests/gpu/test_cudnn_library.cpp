// Where libcudnn comes from (cuda/cudnn_library.hpp), with or without a GPU: AVTRAIN_CUDNN_LIB naming
// a missing file or a library that is not cuDNN gives one line that says so; without it, the loader's
// path or python's site-packages open cuDNN 9, or one line says where it looked. On a GPU: a backend
// with device.fused 1 and no libcudnn runs the own flash kernel and its log words say why.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "core/half.hpp"
#include "cuda_backend.hpp"
#include "cudnn_attention.hpp"
#include "cudnn_library.hpp"
#include "device_gate.hpp"
#include "device_query.hpp"

namespace avtrain::cuda {
namespace {

// Sets an environment variable for the scope, restoring its old value (or its absence) after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = std::make_unique<std::string>(old);
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::unique_ptr<std::string> old_;
};

bool one_line(const std::string& s) { return !s.empty() && s.find('\n') == std::string::npos; }

TEST(CudnnLibrary, AMissingFileNamedByTheEnvironmentIsOneLineAndNoFallback) {
  ScopedEnv lib("AVTRAIN_CUDNN_LIB", "/nonexistent/libcudnn.so.9");
  const CudnnLibrary found = find_cudnn_library();
  EXPECT_EQ(found.handle, nullptr);
  EXPECT_TRUE(one_line(found.problem)) << found.problem;
  EXPECT_NE(found.problem.find("AVTRAIN_CUDNN_LIB=/nonexistent/libcudnn.so.9 does not open"), std::string::npos)
      << found.problem;
}

TEST(CudnnLibrary, ALibraryThatIsNotCudnnIsRefused) {
  ScopedEnv lib("AVTRAIN_CUDNN_LIB", "libm.so.6");  // opens, has no cudnnGetVersion
  const CudnnLibrary found = find_cudnn_library();
  EXPECT_EQ(found.handle, nullptr);
  EXPECT_TRUE(one_line(found.problem)) << found.problem;
  EXPECT_NE(found.problem.find("libm.so.6 is not cuDNN 9"), std::string::npos) << found.problem;
}

TEST(CudnnLibrary, OpensCudnn9OrSaysWhereItLookedInOneLine) {
  ScopedEnv lib("AVTRAIN_CUDNN_LIB", nullptr);
  const CudnnLibrary found = find_cudnn_library();
  if (found.handle) {
    EXPECT_EQ(found.version / 10000, 9u) << found.path;
    EXPECT_TRUE(found.problem.empty());
    std::printf("libcudnn: %s (cuDNN %s)\n", found.path.c_str(), cudnn_version_name(found.version).c_str());
  } else {
    EXPECT_TRUE(one_line(found.problem)) << found.problem;
    EXPECT_NE(found.problem.find("libcudnn.so.9 not found"), std::string::npos) << found.problem;
    EXPECT_NE(found.problem.find("set AVTRAIN_CUDNN_LIB"), std::string::npos) << found.problem;
    std::printf("no libcudnn here: %s\n", found.problem.c_str());
  }
}

TEST(CudnnLibrary, NoPythonAndNoLoaderPathSaysSo) {
  // Only meaningful where the loader does not find it by itself (else the python step is not reached).
  ScopedEnv lib("AVTRAIN_CUDNN_LIB", nullptr);
  ScopedEnv python("AVTRAIN_PYTHON", "/nonexistent/python3");
  const CudnnLibrary found = find_cudnn_library();
  if (found.handle) GTEST_SKIP() << "the loader finds " << found.path << " by itself";
  EXPECT_NE(found.problem.find("/nonexistent/python3's site-packages: no python3 or none"), std::string::npos)
      << found.problem;
}

TEST(CudnnLibrary, VersionNames) {
  EXPECT_EQ(cudnn_version_name(92801), "9.28.1");
  EXPECT_EQ(cudnn_version_name(91900), "9.19.0");
}

// The graphs of CudnnFusedAttention's shapes and the large deck's pass the frontend's validation (its
// support surface: layouts, strides, the [B, 1, 1, L] bias, the deterministic backward) for sm_80 and
// sm_90 against the libcudnn here: no device needed. Skipped where libcudnn does not open; a build
// without the engine fails (the cuda preset must carry it).
TEST(CudnnLibrary, TheGraphsPassTheFrontendsValidationForSm80AndSm90) {
  if (!cudnn_library().handle) GTEST_SKIP() << cudnn_library().problem;
  const SdpaShape shapes[] = {{5, 95, 4, 32, DType::bf16},   {5, 197, 6, 64, DType::f16},  {2, 300, 2, 128, DType::bf16},
                              {3, 70, 2, 16, DType::f16},    {1, 1049, 2, 128, DType::bf16}, {8, 1049, 16, 128, DType::bf16}};
  for (const int sm : {80, 90})
    for (const SdpaShape& s : shapes) EXPECT_EQ(CudnnAttention::validate(s, sm), "") << "sm_" << sm << " " << s.name();
  // And the check can fail: a head dimension that is not a multiple of 8 is refused, saying why.
  const std::string why = CudnnAttention::validate({2, 64, 2, 20, DType::bf16}, 90);
  EXPECT_NE(why, "");
  std::printf("hd 20 on sm_90: %s\n", why.c_str());
}

// The score bias of a masked key (cuDNN's SDPA, cudnn_attention.hpp): finite, its product with
// log2(e) too (cuDNN's exp2), so a fully masked key tile gives no -inf - -inf; and still probability
// exactly 0 in fp32 for any score margin a model reaches (here up to 30000 over the row's lse).
TEST(CudnnLibrary, TheMaskedKeyBiasIsFiniteAndItsProbabilityIsExactlyZero) {
  for (const DType t : {DType::bf16, DType::f16}) {
    const std::uint16_t bits = masked_key_bias_bits(t);
    const float bias = t == DType::bf16 ? bf16_to_float(bits) : half_to_float(bits);
    SCOPED_TRACE(std::string(dtype_name(t)) + " bias " + std::to_string(bias));
    EXPECT_TRUE(std::isfinite(bias));
    EXPECT_TRUE(std::isfinite(bias * 1.4426950408889634f));
    EXPECT_EQ(bias - bias, 0.0f);  // a tile of masked keys: m_old - m_new
    EXPECT_LE(bias, -32768.0f);
    for (const float margin : {-1000.0f, 0.0f, 1000.0f, 30000.0f}) {
      EXPECT_EQ(std::exp(margin + bias), 0.0f) << "margin " << margin;
      EXPECT_EQ(std::exp2((margin + bias) * 1.4426950408889634f), 0.0f) << "margin " << margin;
    }
  }
}

// The log's words where device.fused 1 finds no libcudnn (a process of its own: the library is looked
// for once per process, so this test runs alone: --gtest_filter).
TEST(CudnnBackend, WithoutLibcudnnTheFusedPathRunsTheOwnKernelAndSaysWhy) {
  ScopedEnv lib("AVTRAIN_CUDNN_LIB", "/nonexistent/libcudnn.so.9");
  CudaOptions options;
  options.fused = true;
  auto be = make_cuda_backend(options);
  if (!be->fuses_attention(DType::bf16, 64)) GTEST_SKIP() << "the GPU is older than sm_80";
  const std::string words = be->attention_engine(DType::bf16, 64);
  EXPECT_TRUE(one_line(words)) << words;
  EXPECT_EQ(words.rfind("own flash kernel; no cuDNN: AVTRAIN_CUDNN_LIB=/nonexistent/libcudnn.so.9 does not open", 0), 0u)
      << words;
  options.attention = FusedAttentionEngine::cudnn;  // required: refused in one line
  try {
    make_cuda_backend(options);
    ADD_FAILURE() << "device.attention cudnn without libcudnn was not refused";
  } catch (const std::exception& e) {
    EXPECT_TRUE(one_line(e.what())) << e.what();
    EXPECT_NE(std::string(e.what()).find("--device.attention cudnn: AVTRAIN_CUDNN_LIB="), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace avtrain::cuda

// --gpu: exit 77 (CTest: skipped) where no CUDA device is visible, before any test.
int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  if (argc > 1 && std::string(argv[1]) == "--gpu")
    if (const int code = avtrain::cuda::device_gate(avtrain::cuda::probe_devices()); code != 0) return code;
  return RUN_ALL_TESTS();
}
