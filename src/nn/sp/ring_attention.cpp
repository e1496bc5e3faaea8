#include "nn/sp/ring_attention.h"

#include "nn/sp/ring_pass.h"
#include "ops/ring_attention.h"

#include <limits>

namespace tidal::nn::sp {
namespace {

// Columns [begin, end) of x [B, T', W] by runs of positions: [R, B, T' / R, end - begin], fp32
// (the ring's kernels are fp32: bf16 and fp16 are widened here, and the blocks travel the ring in
// fp32).
Tensor by_runs(const Tensor& x, std::int64_t begin, std::int64_t end, const std::vector<PositionRun>& runs,
               const Context& ctx) {
  const std::int64_t R = std::int64_t(runs.size()), B = x.dim(0), L = x.dim(1) / R;
  Tensor out = ctx.empty({R, B, L, end - begin}, x.dtype());
  for (std::int64_t r = 0; r < R; ++r)
    out.slice(0, r, r + 1).reshape({B, L, end - begin}).copy_from(x.slice(1, r * L, (r + 1) * L).slice(2, begin, end));
  return ctx.as(out, DType::f32);
}

// Run r of a [R, B, L, W] tensor: a contiguous [B, L, W] view.
Tensor run_of(const Tensor& t, std::int64_t r) { return t.slice(0, r, r + 1).reshape({t.dim(1), t.dim(2), t.dim(3)}); }

// [R, B, L, W] -> columns [begin, begin + W) of out [B, R L, ...].
void from_runs(Tensor& out, std::int64_t begin, const Tensor& t) {
  const std::int64_t R = t.dim(0), L = t.dim(2);
  for (std::int64_t r = 0; r < R; ++r)
    out.slice(1, r * L, (r + 1) * L).slice(2, begin, begin + t.dim(3)).copy_from(run_of(t, r));
}

}  // namespace

ops::RingAttentionOptions RingSelfAttention::options(const Context& ctx, std::int64_t first_query) const {
  const Batch* batch = ctx.state().batch;
  // The whole sequence's key mask: keys of every ring position meet this rank's queries.
  const Tensor* mask = batch != nullptr && batch->attn_mask.defined() ? &batch->attn_mask : nullptr;
  return {.n_head = n_head_, .n_kv_head = n_kv_head_, .causal = causal_, .first_query = first_query, .key_mask = mask};
}

Tensor RingSelfAttention::forward(const Tensor& qkv, Context& ctx) {
  const std::int64_t B = qkv.dim(0), T = qkv.dim(1);
  const std::int64_t hd = qkv.dim(2) / (n_head_ + 2 * n_kv_head_), C = n_head_ * hd, Ckv = n_kv_head_ * hd;
  TIDAL_ASSERT(qkv.dim(2) == C + 2 * Ckv, "ring attention: qkv {} for {} query and {} kv heads", qkv.str(), n_head_,
               n_kv_head_);
  const std::vector<PositionRun> mine = positions_.position_runs(T);
  const std::int64_t R = std::int64_t(mine.size()), L = T / R;
  Tensor q = by_runs(qkv, 0, C, mine, ctx), kv = by_runs(qkv, C, C + 2 * Ckv, mine, ctx);
  Tensor y = ctx.empty({R, B, L, C}), lse = ctx.empty({R, B, n_head_, L}), sum = ctx.empty({R, B, n_head_, L});
  y.fill_(0.0f);
  lse.fill_(-std::numeric_limits<float>::infinity());
  sum.fill_(0.0f);
  RingPass(ring_).pass(kv, ctx, [&](const Tensor& block, int owner) {
    const std::vector<PositionRun> theirs = positions_.at_place(owner).position_runs(T);
    for (std::int64_t a = 0; a < R; ++a) {
      Tensor ya = run_of(y, a), la = run_of(lse, a), sa = run_of(sum, a);
      const ops::RingAttentionOptions opt = options(ctx, mine[a].global);
      for (std::int64_t c = 0; c < R; ++c)
        ops::ring_attention_forward(ya, la, sa, run_of(q, a), run_of(block, c), theirs[c].global, opt);
    }
  });
  for (std::int64_t a = 0; a < R; ++a) {
    Tensor ya = run_of(y, a), la = run_of(lse, a);
    ops::ring_attention_finish(ya, la, run_of(sum, a), options(ctx, mine[a].global));
  }
  ctx.saved = {q, kv, y, lse};
  Tensor out = ctx.empty({B, T, C});
  from_runs(out, 0, y);
  return ctx.as(out, qkv.dtype());
}

Tensor RingSelfAttention::backward(const Tensor& dy_given, Context& ctx) {
  const Tensor &q = ctx.saved.at(0), &kv = ctx.saved.at(1), &y = ctx.saved.at(2), &lse = ctx.saved.at(3);
  const std::int64_t R = q.dim(0), B = q.dim(1), L = q.dim(2), T = R * L, C = q.dim(3);
  const std::vector<PositionRun> mine = positions_.position_runs(T);
  const Tensor dy = by_runs(dy_given, 0, C, mine, ctx);
  Tensor dq = ctx.empty(q.shape());
  dq.fill_(0.0f);
  const Tensor dkv = RingPass(ring_).pass(
      kv, ctx, [](const Tensor&, int) {},
      [&](const Tensor& block, int owner, Tensor& acc) {
        const std::vector<PositionRun> theirs = positions_.at_place(owner).position_runs(T);
        for (std::int64_t a = 0; a < R; ++a) {
          Tensor dqa = run_of(dq, a);
          const ops::RingAttentionOptions opt = options(ctx, mine[a].global);
          for (std::int64_t c = 0; c < R; ++c) {
            Tensor dkv_c = run_of(acc, c);
            ops::ring_attention_backward(dqa, dkv_c, run_of(q, a), run_of(block, c), run_of(y, a), run_of(dy, a),
                                         run_of(lse, a), theirs[c].global, opt);
          }
        }
      });
  Tensor dqkv = ctx.empty({B, T, C + kv.dim(3)});
  from_runs(dqkv, 0, dq);
  from_runs(dqkv, C, dkv);
  ctx.saved.clear();
  return ctx.as(dqkv, dy_given.dtype());
}

}  // namespace tidal::nn::sp
