#include "nn/sp/ring_attention.h"

#include "nn/sp/ring_pass.h"
#include "ops/ring_attention.h"

#include <limits>

namespace tidal::nn::sp {
namespace {

// Columns [begin, end) of x [B, T', W], contiguous, in fp32 (the ring's kernels are fp32: bf16 and
// fp16 are widened here, and the blocks travel the ring in fp32).
Tensor columns(const Tensor& x, std::int64_t begin, std::int64_t end, const Context& ctx) {
  Tensor out = ctx.empty({x.dim(0), x.dim(1), end - begin}, x.dtype());
  out.copy_from(x.slice(2, begin, end));
  return ctx.as(out, DType::f32);
}

// Positions [run.local, run.local + run.length) of a [B, T', ...] tensor (dim 1), or of the per-row
// statistics [B, H, T'] (dim 2): views.
Tensor rows(const Tensor& t, const PositionRun& run) { return t.slice(1, run.local, run.local + run.length); }
Tensor stats(const Tensor& t, const PositionRun& run) { return t.slice(2, run.local, run.local + run.length); }

}  // namespace

ops::RingAttentionOptions RingSelfAttention::options(const Context& ctx, std::int64_t first_query) const {
  const Batch* batch = ctx.state().batch;
  // The whole sequence's masks: keys of every ring position meet this rank's queries.
  const Tensor* mask = batch != nullptr && batch->attn_mask.defined() ? &batch->attn_mask : nullptr;
  const Tensor* docs = batch != nullptr && batch->positions.defined() ? &batch->positions : nullptr;
  return {.n_head = n_head_,
          .n_kv_head = n_kv_head_,
          .causal = causal_,
          .first_query = first_query,
          .key_mask = mask,
          .doc_positions = docs};
}

Tensor RingSelfAttention::forward(const Tensor& qkv, Context& ctx) {
  const std::int64_t B = qkv.dim(0), T = qkv.dim(1);
  const std::int64_t hd = qkv.dim(2) / (n_head_ + 2 * n_kv_head_), C = n_head_ * hd, Ckv = n_kv_head_ * hd;
  TIDAL_ASSERT(qkv.dim(2) == C + 2 * Ckv, "ring attention: qkv {} for {} query and {} kv heads", qkv.str(), n_head_,
               n_kv_head_);
  const std::vector<PositionRun> mine = positions_.position_runs(T);
  Tensor q = columns(qkv, 0, C, ctx), kv = columns(qkv, C, C + 2 * Ckv, ctx);
  Tensor y = ctx.empty({B, T, C}), lse = ctx.empty({B, n_head_, T}), sum = ctx.empty({B, n_head_, T});
  y.fill_(0.0f);
  lse.fill_(-std::numeric_limits<float>::infinity());
  sum.fill_(0.0f);
  RingPass(ring_).pass(kv, ctx, [&](const Tensor& block, int owner) {
    for (const PositionRun& theirs : positions_.at_place(owner).position_runs(T))
      for (const PositionRun& run : mine) {
        Tensor y_run = rows(y, run), lse_run = stats(lse, run), sum_run = stats(sum, run);
        ops::ring_attention_forward(y_run, lse_run, sum_run, rows(q, run), rows(block, theirs), theirs.global,
                                    options(ctx, run.global));
      }
  });
  for (const PositionRun& run : mine) {
    Tensor y_run = rows(y, run), lse_run = stats(lse, run);
    ops::ring_attention_finish(y_run, lse_run, stats(sum, run), options(ctx, run.global));
  }
  // qkv as given (q and kv are remade from it in backward: in bf16 that keeps half the bytes, and
  // a parent may let it go and remake it, nn/context.h); in fp32, y is also the output, the
  // projection's input, kept once.
  ctx.saved = {qkv, y, lse};
  return ctx.as(y, qkv.dtype());
}

Tensor RingSelfAttention::backward(const Tensor& dy_given, Context& ctx) {
  const Tensor &qkv = ctx.saved.at(0), &y = ctx.saved.at(1), &lse = ctx.saved.at(2);
  const std::int64_t T = qkv.dim(1), C = y.dim(2);
  const Tensor q = columns(qkv, 0, C, ctx), kv = columns(qkv, C, qkv.dim(2), ctx);
  const std::vector<PositionRun> mine = positions_.position_runs(T);
  const Tensor dy = ctx.as(dy_given, DType::f32);
  Tensor dq = ctx.empty(q.shape());
  dq.fill_(0.0f);
  const Tensor dkv = RingPass(ring_).pass(
      kv, ctx, [](const Tensor&, int) {},
      [&](const Tensor& block, int owner, Tensor& acc) {
        for (const PositionRun& theirs : positions_.at_place(owner).position_runs(T)) {
          Tensor dkv_run = rows(acc, theirs);
          for (const PositionRun& run : mine) {
            Tensor dq_run = rows(dq, run);
            ops::ring_attention_backward(dq_run, dkv_run, rows(q, run), rows(block, theirs), rows(y, run),
                                         rows(dy, run), stats(lse, run), theirs.global, options(ctx, run.global));
          }
        }
      });
  Tensor dqkv = ctx.empty({q.dim(0), T, C + kv.dim(2)});
  dqkv.slice(2, 0, C).copy_from(dq);
  dqkv.slice(2, C, dqkv.dim(2)).copy_from(dkv);
  ctx.saved.clear();
  return ctx.as(dqkv, dy_given.dtype());
}

}  // namespace tidal::nn::sp
