// bf16 matrix products through oneDNN's matmul primitive (oneDNN 2.x C++ API): bf16 src and
// weights, fp32 dst, fp32 accumulation. alpha is a common output scale, beta a sum post-op, so
// dst = alpha * (src x weights) + beta * dst in one pass; transposes and leading dimensions are
// strides of plain 2-D memory descriptors, so nothing is copied.
#include "backend/cpu/onednn_gemm.hpp"

#include <algorithm>
#include <cstdlib>
#include <sstream>
#include <string>

#include "core/error.hpp"

#if AVTRAIN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>

#include <atomic>
#include <bit>
#include <compare>
#include <map>
#include <vector>

#include "core/half.hpp"
#endif

namespace avtrain::cpu {

namespace {

enum class Mode { automatic, force, off };

struct EnvMode {
  Mode mode = Mode::automatic;
  std::string note;  // set when the value was not understood
};

// AVTRAIN_ONEDNN: "force", "off" (or "0"); unset, "", "auto", "on", "1" leave it to the CPU.
[[maybe_unused]] EnvMode env_mode() {
  EnvMode m;
  const char* v = std::getenv("AVTRAIN_ONEDNN");
  if (v == nullptr) return m;
  const std::string s(v);
  if (s == "force") {
    m.mode = Mode::force;
  } else if (s == "off" || s == "0") {
    m.mode = Mode::off;
  } else if (!(s.empty() || s == "auto" || s == "on" || s == "1")) {
    m.note = " (AVTRAIN_ONEDNN=" + s + " not understood: want force, off or auto)";
  }
  return m;
}

// Elements spanned by a row-major operand stored as rows x cols with leading dimension ld.
struct Stored {
  int rows, cols;
};
Stored stored(Trans t, int rows_op, int cols_op) {
  return t == Trans::yes ? Stored{cols_op, rows_op} : Stored{rows_op, cols_op};
}

std::string shape_text(Trans ta, Trans tb, int M, int N, int K, float alpha, int lda, int ldb, float beta,
                       int ldc) {
  std::ostringstream s;
  s << "oneDNN bf16 gemm (ta=" << (ta == Trans::yes ? 'T' : 'N') << " tb=" << (tb == Trans::yes ? 'T' : 'N')
    << " M=" << M << " N=" << N << " K=" << K << " lda=" << lda << " ldb=" << ldb << " ldc=" << ldc
    << " alpha=" << alpha << " beta=" << beta << ")";
  return s.str();
}

// BLAS's argument rules, with BLAS's quick returns: nothing when M or N is 0; C = beta * C without
// reading A or B when K is 0 or alpha is 0 (beta == 0 sets C to zero without reading it).
[[maybe_unused]] bool check_and_quick_return(Trans ta, Trans tb, int M, int N, int K, float alpha, const void* A, int lda,
                            const void* B, int ldb, float beta, float* C, int ldc) {
  const Stored a = stored(ta, M, K), b = stored(tb, K, N);
  if (M < 0 || N < 0 || K < 0 || lda < std::max(1, a.cols) || ldb < std::max(1, b.cols) || ldc < std::max(1, N))
    throw Error(shape_text(ta, tb, M, N, K, alpha, lda, ldb, beta, ldc) + ": bad size or leading dimension");
  if (M == 0 || N == 0) return true;
  require(C != nullptr, shape_text(ta, tb, M, N, K, alpha, lda, ldb, beta, ldc) + ": C is null");
  if (K == 0 || alpha == 0.0f) {
    for (int i = 0; i < M; ++i) {
      float* row = C + std::size_t(i) * ldc;
      if (beta == 0.0f) std::fill(row, row + N, 0.0f);
      else if (beta != 1.0f) for (int j = 0; j < N; ++j) row[j] *= beta;
    }
    return true;
  }
  require(A != nullptr && B != nullptr, shape_text(ta, tb, M, N, K, alpha, lda, ldb, beta, ldc) + ": A or B is null");
  return false;
}

}  // namespace

#if AVTRAIN_HAVE_ONEDNN

namespace {

const char* isa_name(dnnl::cpu_isa isa) {
  using dnnl::cpu_isa;
  switch (isa) {
    case cpu_isa::all: return "all";
    case cpu_isa::sse41: return "sse41";
    case cpu_isa::avx: return "avx";
    case cpu_isa::avx2: return "avx2";
#if DNNL_VERSION_MAJOR > 2 || DNNL_VERSION_MINOR >= 6  // not in oneDNN 2.0 (Debian 11)
    case cpu_isa::avx2_vnni: return "avx2_vnni";
#endif
    case cpu_isa::avx512_mic: return "avx512_mic";
    case cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case cpu_isa::avx512_core: return "avx512_core";
    case cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case cpu_isa::avx512_core_amx: return "avx512_core_amx";
  }
  return "unknown";
}

struct Decision {
  bool enabled = false;
  bool bf16_units = false;
  std::string description;
};

const Decision& decision() {
  static const Decision d = [] {
    Decision r;
    const EnvMode env = env_mode();
    const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
    // In oneDNN 2.6 only these two ISAs have bf16 dot products (AMX includes AVX512-BF16).
    r.bf16_units = isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
    const dnnl_version_t* v = dnnl_version();
    std::ostringstream s;
    s << "oneDNN " << v->major << '.' << v->minor << '.' << v->patch << " (isa " << isa_name(isa) << "): ";
    if (env.mode == Mode::off) {
      s << "off (AVTRAIN_ONEDNN=off)";
    } else if (env.mode == Mode::force) {
      r.enabled = true;
      if (r.bf16_units) s << "on (forced)";
      else s << "forced, no bf16 units: operands unpacked to fp32 for oneDNN's fp32 matmul";
    } else {
      r.enabled = r.bf16_units;
      s << (r.bf16_units ? "on" : "off, no bf16 units") << env.note;
    }
    r.description = s.str();
    return r;
  }();
  return d;
}

// Shapes whose bf16 matmul oneDNN does not implement, run unpacked to fp32 instead.
std::atomic<int> g_unpacked_shapes{0};

struct Key {
  int ta, tb, M, N, K, lda, ldb, ldc;
  std::uint32_t alpha_bits, beta_bits;
  auto operator<=>(const Key&) const = default;
};

struct Entry {
  dnnl::matmul primitive;
  dnnl::memory::desc a, b, c;
  bool unpacked = false;  // an fp32 primitive: operands are widened first
};

// One engine and stream per thread, and that thread's primitives: no locks, and a primitive is
// never executed by two threads at once.
struct ThreadState {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{engine};
  std::map<Key, Entry> cache;
  std::vector<float> a32, b32;  // widened operands, for unpacked entries
};
constexpr std::size_t kMaxCachedShapes = 256;

ThreadState& thread_state() {
  thread_local ThreadState s;
  return s;
}

dnnl::memory::desc plain(dnnl::memory::data_type type, Trans t, int rows_op, int cols_op, int ld) {
  using dims = dnnl::memory::dims;
  // op(X)[rows_op, cols_op]; stored row-major as X (transposed when t is yes) with leading dim ld.
  const dims strides = t == Trans::yes ? dims{1, ld} : dims{ld, 1};
  return dnnl::memory::desc(dims{rows_op, cols_op}, type, strides);
}

Entry make_entry(const Key& k, const dnnl::engine& engine) {
  using dt = dnnl::memory::data_type;
  const Trans ta = k.ta ? Trans::yes : Trans::no, tb = k.tb ? Trans::yes : Trans::no;
  const float alpha = bits_float(k.alpha_bits), beta = bits_float(k.beta_bits);
  dnnl::primitive_attr attr;
  // dst = output_scale * (src x weights), then post-ops: sum adds sum_scale * (dst as it was).
  if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
  if (beta != 0.0f) {  // with no sum post-op dst is write-only: beta == 0 never reads C (NaN stays out)
    dnnl::post_ops ops;
    ops.append_sum(beta);
    attr.set_post_ops(ops);
  }
  Entry e;
  e.c = dnnl::memory::desc({k.M, k.N}, dt::f32, dnnl::memory::dims{k.ldc, 1});
  auto build = [&](dt type) {
    e.a = plain(type, ta, k.M, k.K, k.lda);
    e.b = plain(type, tb, k.K, k.N, k.ldb);
    const dnnl::matmul::desc desc(e.a, e.b, e.c);
    e.primitive = dnnl::matmul(dnnl::matmul::primitive_desc(desc, attr, engine));
  };
  try {
    build(dt::bf16);
  } catch (const dnnl::error& err) {
    // oneDNN 2.6 implements bf16 matmul only from AVX-512 on (not even a reference kernel below).
    if (err.status != dnnl_unimplemented) throw;
    build(dt::f32);
    e.unpacked = true;
    g_unpacked_shapes.fetch_add(1, std::memory_order_relaxed);
  }
  return e;
}

// The operand widened to fp32 in the same layout (padding between rows left unwritten).
float* widen(const std::uint16_t* x, Stored s, int ld, std::vector<float>& out) {
  const std::size_t n = std::size_t(s.rows - 1) * ld + s.cols;
  if (out.size() < n) out.resize(n);
  if (ld == s.cols) {
    bf16_to_floats(x, out.data(), n);
  } else {
    for (int r = 0; r < s.rows; ++r) bf16_to_floats(x + std::size_t(r) * ld, out.data() + std::size_t(r) * ld, s.cols);
  }
  return out.data();
}

}  // namespace

bool onednn_bf16_enabled() { return decision().enabled; }

std::string onednn_description() {
  std::string s = decision().description;
  const int unpacked = g_unpacked_shapes.load(std::memory_order_relaxed);
  if (unpacked > 0 && decision().bf16_units)
    s += "; " + std::to_string(unpacked) + " shape(s) without a bf16 kernel ran unpacked to fp32";
  return s;
}

void onednn_gemm_bf16(Trans ta, Trans tb, int M, int N, int K, float alpha, const std::uint16_t* A, int lda,
                      const std::uint16_t* B, int ldb, float beta, float* C, int ldc) {
  if (check_and_quick_return(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc)) return;
  decision();  // the environment is read once, before any oneDNN work
  try {
    ThreadState& st = thread_state();
    const Key key{ta == Trans::yes, tb == Trans::yes, M, N, K, lda, ldb, ldc,
                  float_bits(alpha), float_bits(beta)};
    auto it = st.cache.find(key);
    if (it == st.cache.end()) {
      if (st.cache.size() >= kMaxCachedShapes) st.cache.clear();
      it = st.cache.emplace(key, make_entry(key, st.engine)).first;
    }
    const Entry& e = it->second;
    void* a = const_cast<std::uint16_t*>(A);
    void* b = const_cast<std::uint16_t*>(B);
    if (e.unpacked) {
      a = widen(A, stored(ta, M, K), lda, st.a32);
      b = widen(B, stored(tb, K, N), ldb, st.b32);
    }
    const dnnl::memory ma(e.a, st.engine, a), mb(e.b, st.engine, b), mc(e.c, st.engine, C);
    e.primitive.execute(st.stream, {{DNNL_ARG_SRC, ma}, {DNNL_ARG_WEIGHTS, mb}, {DNNL_ARG_DST, mc}});
    st.stream.wait();
  } catch (const dnnl::error& err) {
    throw Error(shape_text(ta, tb, M, N, K, alpha, lda, ldb, beta, ldc) + ": " + err.what() + " (dnnl status " +
                std::to_string(int(err.status)) + ")");
  }
}

#else  // built without oneDNN

bool onednn_bf16_enabled() { return false; }

std::string onednn_description() { return "oneDNN not built"; }

void onednn_gemm_bf16(Trans ta, Trans tb, int M, int N, int K, float alpha, const std::uint16_t* A, int lda,
                      const std::uint16_t* B, int ldb, float beta, float* C, int ldc) {
  (void)A, (void)B, (void)C;
  throw Error(shape_text(ta, tb, M, N, K, alpha, lda, ldb, beta, ldc) +
              ": avtrain was built without oneDNN (install libdnnl-dev and reconfigure)");
}

#endif

}  // namespace avtrain::cpu
