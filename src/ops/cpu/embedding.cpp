#include "ops/embedding.h"

#include "ops/cast.h"
#include "ops/cpu/typed.h"

namespace tidal::ops::cpu {
namespace {

void check_ids(const Tensor& ids, std::int64_t V) {
  expect_cpu_contiguous(ids, "embedding ids");
  TIDAL_ASSERT(ids.dtype() == DType::i32, "embedding ids must be i32, got {}", ids.str());
  const std::int32_t* p = ids.data<std::int32_t>();
  for (std::int64_t i = 0; i < ids.numel(); ++i)
    TIDAL_CHECK((p[i] >= 0 && p[i] < V) || p[i] == kIdElsewhere,
                "token id {} at position {} is outside the vocabulary [0, {}): check model.vocab_size against "
                "the data",
                p[i], i, V);
}

}  // namespace

void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& table, bool accumulate) {
  expect_cpu_contiguous(y, "embedding y");
  expect_cpu_contiguous(table, "embedding table");
  const std::int64_t V = table.dim(0), C = table.dim(1), N = ids.numel();
  check_ids(ids, V);
  TIDAL_ASSERT(y.numel() == N * C && y.dtype() == table.dtype(), "embedding y {} for ids {} table {}", y.str(),
               ids.str(), table.str());
  const std::int32_t* pid = ids.data<std::int32_t>();
  with_float_type(y.dtype(), [&]<class T>() {
    const T* pt = table.data<T>();
    T* py = y.data<T>();
#pragma omp parallel for schedule(static)
    for (std::int64_t n = 0; n < N; ++n) {
      T* out = py + n * C;
      if (pid[n] == kIdElsewhere) {
        if (!accumulate)
          for (std::int64_t c = 0; c < C; ++c) out[c] = from_float<T>(0.0f);
        continue;
      }
      const T* row = pt + std::int64_t(pid[n]) * C;
      for (std::int64_t c = 0; c < C; ++c)
        out[c] = accumulate ? from_float<T>(to_float(out[c]) + to_float(row[c])) : row[c];
    }
  });
}

void embedding_backward(Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  expect_cpu_contiguous(dtable, "embedding dtable");
  expect_cpu_contiguous(dy, "embedding dy");
  const std::int64_t V = dtable.dim(0), C = dtable.dim(1), N = ids.numel();
  check_ids(ids, V);
  TIDAL_ASSERT(dy.numel() == N * C && (dy.dtype() == dtable.dtype() || dtable.dtype() == DType::f32),
               "embedding dy {} for the table's gradient {}", dy.str(), dtable.str());
  const std::int32_t* pid = ids.data<std::int32_t>();
  // Accumulate in fp32 and round once: summing many tokens straight into bf16 would round at
  // every addition. Low-precision tables get an fp32 scratch copy.
  Tensor acc = dtable.dtype() == DType::f32 ? dtable : Tensor::empty(dtable.shape());
  if (dtable.dtype() != DType::f32) cast(acc, dtable);
  float* pa = acc.data<float>();
  with_float_type(dy.dtype(), [&]<class T>() {
    const T* pdy = dy.data<T>();
    // Threads split the channels, so two tokens with the same id never race on a row.
#pragma omp parallel for schedule(static)
    for (std::int64_t c0 = 0; c0 < C; c0 += 16) {
      const std::int64_t c1 = std::min(C, c0 + 16);
      for (std::int64_t n = 0; n < N; ++n) {
        if (pid[n] == kIdElsewhere) continue;
        float* row = pa + std::int64_t(pid[n]) * C;
        const T* g = pdy + n * C;
        for (std::int64_t c = c0; c < c1; ++c) row[c] += to_float(g[c]);
      }
    }
  });
  if (dtable.dtype() != DType::f32) cast(dtable, acc);
}

void position_embedding_forward(Tensor& y, const Tensor& table, std::int64_t first_position) {
  expect_cpu_contiguous(y, "position y");
  expect_cpu_contiguous(table, "position table");
  TIDAL_ASSERT(y.ndim() == 3 && y.dim(2) == table.dim(1) && y.dtype() == table.dtype(), "position y {} table {}",
               y.str(), table.str());
  const std::int64_t B = y.dim(0), T = y.dim(1), C = y.dim(2);
  TIDAL_CHECK(first_position + T <= table.dim(0),
              "sequence of {} tokens from position {} is longer than the {} learned positions (model.seq_len)", T,
              first_position, table.dim(0));
  with_float_type(y.dtype(), [&]<class Tp>() {
    const Tp* pt = table.data<Tp>() + first_position * C;
    Tp* py = y.data<Tp>();
#pragma omp parallel for collapse(2) schedule(static)
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t t = 0; t < T; ++t) {
        Tp* out = py + (b * T + t) * C;
        for (std::int64_t c = 0; c < C; ++c) out[c] = from_float<Tp>(to_float(out[c]) + to_float(pt[t * C + c]));
      }
  });
}

void position_embedding_backward(Tensor& dtable, const Tensor& dy, std::int64_t first_position) {
  expect_cpu_contiguous(dtable, "position dtable");
  expect_cpu_contiguous(dy, "position dy");
  const std::int64_t B = dy.dim(0), T = dy.dim(1), C = dy.dim(2);
  TIDAL_ASSERT(first_position + T <= dtable.dim(0) && dtable.dim(1) == C, "position dtable {} dy {}", dtable.str(),
               dy.str());
  with_gradient_types(dy.dtype(), dtable.dtype(), [&]<class Tp, class G>() {
    const Tp* pdy = dy.data<Tp>();
    G* pdt = dtable.data<G>() + first_position * C;
#pragma omp parallel for schedule(static)
    for (std::int64_t t = 0; t < T; ++t)
      for (std::int64_t c = 0; c < C; ++c) {
        float s = 0.0f;
        for (std::int64_t b = 0; b < B; ++b) s += to_float(pdy[(b * T + t) * C + c]);
        pdt[t * C + c] = from_float<G>(to_float(pdt[t * C + c]) + s);
      }
  });
}

void embedding_shard_ids(Tensor& local, const Tensor& ids, std::int64_t first, std::int64_t count, std::int64_t vocab) {
  expect_cpu_contiguous({&local, &ids}, "embedding_shard_ids operand");
  TIDAL_ASSERT(ids.dtype() == DType::i32 && local.dtype() == DType::i32 && local.numel() == ids.numel(),
               "embedding_shard_ids: local {} for ids {} (i32)", local.str(), ids.str());
  const std::int32_t* g = ids.data<std::int32_t>();
  std::int32_t* l = local.data<std::int32_t>();
  for (std::int64_t i = 0; i < ids.numel(); ++i) {
    TIDAL_CHECK(g[i] >= 0 && g[i] < vocab, "token id {} at position {} is outside the vocabulary [0, {}): check "
                "model.vocab_size against the data", g[i], i, vocab);
    l[i] = g[i] >= first && g[i] < first + count ? std::int32_t(g[i] - first) : kIdElsewhere;
  }
}

}  // namespace tidal::ops::cpu
