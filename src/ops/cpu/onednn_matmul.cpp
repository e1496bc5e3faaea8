// Primitive creation costs 0.2-0.7 ms here, more than a small product takes: primitives are
// made once per shape, type and scaling and kept in a cache (a step has a few dozen distinct
// shapes; a mixture's experts' batches add up to eight an octave of rows), and each thread keeps its
// own memory objects and stream for each. A thread runs one product at a time, so its primitives
// share one scratchpad, as large as the largest asks (AMX kernels copy the weights into it: 3.7 MB
// for a 512 x 3584 bf16 matrix): concurrent calls never share one, and a call allocates nothing
// once its thread has met its largest shape.
#include "ops/cpu/onednn_matmul.h"

#if TIDAL_ONEDNN

#include "core/error.h"
#include "ops/cpu/sgemm.h"

#include <dnnl.hpp>
#include <fmt/format.h>
#include <omp.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

static_assert(DNNL_VERSION_MAJOR == 2, "ops/cpu/onednn_matmul.cpp is written against oneDNN 2.x (Debian's 2.6)");

namespace tidal::ops::cpu {
namespace {

using dt = dnnl::memory::data_type;

std::optional<dt> onednn_type(DType t) {
  switch (t) {
    case DType::f32: return dt::f32;
    case DType::bf16: return dt::bf16;
    case DType::f16: return dt::f16;
    case DType::i32:
    case DType::u8: break;
  }
  return std::nullopt;
}

// Everything a primitive is made for.
using Key = std::tuple<std::int64_t, std::int64_t, std::int64_t,  // m n k
                       std::int64_t, std::int64_t, std::int64_t,  // lda ldb ldc
                       bool, bool, int, int, int,                 // trans a, trans b; types of a, b, c
                       float, float, bool>;                       // alpha, beta, inside a parallel region

struct Cached {
  std::unique_ptr<dnnl::matmul> primitive;  // null: oneDNN has no fast kernel for this
  dnnl::memory::desc a, b, c, scratchpad;
};

// Whether the CPU multiplies bf16 itself (AVX512-BF16 or AMX); elsewhere oneDNN emulates bf16.
bool native_bf16_isa() {
  const dnnl::cpu_isa isa = dnnl::get_effective_cpu_isa();
  return isa == dnnl::cpu_isa::avx512_core_bf16 || isa == dnnl::cpu_isa::avx512_core_amx;
}

bool usable_implementation(const std::string& impl, dt type) {
  // "ref" kernels are oneDNN's reference loops, and emulated bf16 is slow: OpenBLAS on widened
  // operands beats both.
  if (impl.find("ref") != std::string::npos) return false;
  return type != dt::bf16 || native_bf16_isa();
}

class MatmulCache {
 public:
  MatmulCache() : engine_(dnnl::engine::kind::cpu, 0) {}

  const dnnl::engine& engine() const { return engine_; }

  const Cached& get(const Key& key) {
    std::lock_guard lock(mutex_);
    auto it = cache_.find(key);
    if (it == cache_.end()) it = cache_.emplace(key, make(key)).first;
    return it->second;
  }

 private:
  Cached make(const Key& key) const {
    const auto [m, n, k, lda, ldb, ldc, ta, tb, at, bt, ct, alpha, beta, nested] = key;
    Cached out;
    out.a = dnnl::memory::desc({m, k}, dt(at), ta ? dnnl::memory::dims{1, lda} : dnnl::memory::dims{lda, 1});
    out.b = dnnl::memory::desc({k, n}, dt(bt), tb ? dnnl::memory::dims{1, ldb} : dnnl::memory::dims{ldb, 1});
    out.c = dnnl::memory::desc({m, n}, dt(ct), dnnl::memory::dims{ldc, 1});
    dnnl::primitive_attr attr;
    attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
    if (alpha != 1.0f) attr.set_output_scales(0, {alpha});
    if (beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(beta);
      attr.set_post_ops(ops);
    }
    try {
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(out.a, out.b, out.c), attr, engine_);
      if (!usable_implementation(pd.impl_info_str(), dt(at))) return out;
      out.scratchpad = pd.scratchpad_desc();
      out.primitive = std::make_unique<dnnl::matmul>(pd);
    } catch (const dnnl::error&) {
      // unimplemented for these types here: the caller's path runs
    }
    return out;
  }

  dnnl::engine engine_;
  std::mutex mutex_;
  std::map<Key, Cached> cache_;
};

MatmulCache& cache() {
  static MatmulCache c;
  return c;
}

bool enabled() { return gemm_choice() != GemmChoice::openblas; }

// A primitive as one thread runs it: its memory objects (data handles set per call), so a call
// takes no lock after the first on its thread.
struct Bound {
  const Cached* shared;
  dnnl::memory a, b, c, scratchpad;
};

// The calling thread's scratchpad, at least `bytes` long (64-byte aligned, as oneDNN's own are).
void* thread_scratchpad(std::size_t bytes) {
  struct Free {
    void operator()(void* p) const { std::free(p); }
  };
  thread_local std::unique_ptr<void, Free> buffer;
  thread_local std::size_t size = 0;
  if (bytes > size) {
    constexpr std::size_t kAlign = 64;
    size = (bytes + kAlign - 1) / kAlign * kAlign;
    buffer.reset(std::aligned_alloc(kAlign, size));
    TIDAL_CHECK(buffer != nullptr, "out of host memory for a {}-byte oneDNN scratchpad", size);
  }
  return buffer.get();
}

Bound* bound(const Key& key) {
  thread_local std::map<Key, std::unique_ptr<Bound>> mine;
  auto it = mine.find(key);
  if (it != mine.end()) return it->second.get();
  const Cached& p = cache().get(key);
  std::unique_ptr<Bound> b;
  if (p.primitive) {
    const dnnl::engine& eng = cache().engine();
    b.reset(new Bound{&p, dnnl::memory(p.a, eng, DNNL_MEMORY_NONE), dnnl::memory(p.b, eng, DNNL_MEMORY_NONE),
                      dnnl::memory(p.c, eng, DNNL_MEMORY_NONE), dnnl::memory(p.scratchpad, eng, DNNL_MEMORY_NONE)});
  }
  return mine.emplace(key, std::move(b)).first->second.get();
}

}  // namespace

bool onednn_matmul(void* c, DType c_type, std::int64_t ldc, const MatmulOperand& a, const MatmulOperand& b,
                   std::int64_t m, std::int64_t n, std::int64_t k, float alpha, float beta) {
  if (!enabled() || m == 0 || n == 0 || k == 0 || a.dtype != b.dtype) return false;
  const auto at = onednn_type(a.dtype), ct = onednn_type(c_type);
  if (!at || !ct || a.dtype == DType::f16) return false;
  const Key key{m, n, k, a.ld, b.ld, ldc, a.trans, b.trans, int(*at), int(*at), int(*ct), alpha, beta,
                omp_in_parallel() != 0};
  Bound* p = bound(key);
  if (!p) return false;
  thread_local dnnl::stream stream(cache().engine());
  p->a.set_data_handle(const_cast<void*>(a.data));
  p->b.set_data_handle(const_cast<void*>(b.data));
  p->c.set_data_handle(c);
  p->scratchpad.set_data_handle(thread_scratchpad(p->shared->scratchpad.get_size()));
  p->shared->primitive->execute(stream, {{DNNL_ARG_SRC, p->a},
                                         {DNNL_ARG_WEIGHTS, p->b},
                                         {DNNL_ARG_DST, p->c},
                                         {DNNL_ARG_SCRATCHPAD, p->scratchpad}});
  stream.wait();
  return true;
}

bool onednn_bf16_native() {
  static const bool native = [] {
    if (!enabled()) return false;
    // Whether this CPU has bf16 kernels: ask for one small bf16 product.
    const Key probe{64, 64, 64, 64, 64, 64, false, false, int(dt::bf16), int(dt::bf16), int(dt::f32), 1.0f, 0.0f, false};
    return cache().get(probe).primitive != nullptr;
  }();
  return native;
}

std::string onednn_description() {
  if (!enabled()) return {};
  const dnnl_version_t* v = dnnl_version();
  return fmt::format("oneDNN {}.{}.{}", v->major, v->minor, v->patch);
}

}  // namespace tidal::ops::cpu

#else  // built without oneDNN

namespace tidal::ops::cpu {

bool onednn_matmul(void*, DType, std::int64_t, const MatmulOperand&, const MatmulOperand&, std::int64_t, std::int64_t,
                   std::int64_t, float, float) {
  return false;
}

bool onednn_bf16_native() { return false; }

std::string onednn_description() { return {}; }

}  // namespace tidal::ops::cpu

#endif
