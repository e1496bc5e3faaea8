#include "nn/sp/ulysses_attention.h"

#include "comm/all_to_all.h"
#include "ops/attention.h"

namespace tidal::nn::sp {

UlyssesSelfAttention::UlyssesSelfAttention(int n_head, int n_kv_head, bool causal, comm::Communicator& group,
                                           BatchSlice positions)
    : n_head_(n_head), n_kv_head_(n_kv_head), causal_(causal), group_(group), positions_(positions) {
  const int N = group.size();
  TIDAL_ASSERT(n_head % N == 0 && n_kv_head % N == 0, "Ulysses attention: {} query and {} kv heads over {} ranks",
               n_head, n_kv_head, N);
}

std::vector<UlyssesSelfAttention::Columns> UlyssesSelfAttention::columns_of(int j, std::int64_t hd) const {
  const std::int64_t N = group_.size(), H = n_head_, Hkv = n_kv_head_, kv_local = Hkv / N;
  const std::int64_t C = H * hd, Ckv = Hkv * hd, width = kv_local * hd, queries = H / N * hd;
  std::vector<Columns> out;
  for (std::int64_t i = 0; i < H / Hkv; ++i) out.push_back({(i * Hkv + j * kv_local) * hd, i * width, width});
  out.push_back({C + j * width, queries, width});                // keys
  out.push_back({C + Ckv + j * width, queries + width, width});  // values
  return out;
}

std::vector<Tensor> UlyssesSelfAttention::rows_by_rank(const Tensor& x, const Context& ctx) const {
  const std::int64_t local = x.dim(1) / group_.size();
  std::vector<Tensor> parts;
  for (int s = 0; s < group_.size(); ++s) {
    Tensor part = ctx.empty({x.dim(0), local, x.dim(2)}, x.dtype());
    positions_.at_place(s).take_positions(x, part);
    parts.push_back(part);
  }
  return parts;
}

void UlyssesSelfAttention::place_rows(Tensor& x, const std::vector<Tensor>& parts) const {
  for (int s = 0; s < group_.size(); ++s) positions_.at_place(s).put_positions(x, parts[s]);
}

namespace {

ops::AttentionOptions options(int n_head, int n_kv_head, bool causal, const Context& ctx) {
  const Batch* batch = ctx.state().batch;  // samples are whole: the batch's masks as they are
  const Tensor* mask = batch != nullptr && batch->attn_mask.defined() ? &batch->attn_mask : nullptr;
  const Tensor* docs = batch != nullptr && batch->positions.defined() ? &batch->positions : nullptr;
  return {.n_head = n_head,
          .n_kv_head = n_kv_head,
          .causal = causal,
          .key_mask = mask,
          .doc_positions = docs,
          .kernels = ctx.state().attention};
}

std::vector<Tensor> empties(int n, const Shape& shape, DType dtype, const Context& ctx) {
  std::vector<Tensor> out;
  for (int i = 0; i < n; ++i) out.push_back(ctx.empty(shape, dtype));
  return out;
}

}  // namespace

Tensor UlyssesSelfAttention::forward(const Tensor& qkv, Context& ctx) {
  const int N = group_.size();
  const std::int64_t B = qkv.dim(0), local = qkv.dim(1), T = local * N;
  const std::int64_t hd = qkv.dim(2) / (n_head_ + 2 * n_kv_head_), heads = n_head_ / N, kv_heads = n_kv_head_ / N;
  TIDAL_ASSERT(qkv.dim(2) == (n_head_ + 2 * n_kv_head_) * hd, "Ulysses attention: qkv {} for {} and {} heads",
               qkv.str(), n_head_, n_kv_head_);
  const std::int64_t width = (heads + 2 * kv_heads) * hd;
  // Sequence split -> head split: rank j gets its heads' columns of this rank's positions.
  std::vector<Tensor> send = empties(N, {B, local, width}, qkv.dtype(), ctx);
  std::vector<Tensor> recv = empties(N, {B, local, width}, qkv.dtype(), ctx);
  for (int j = 0; j < N; ++j)
    for (const Columns& c : columns_of(j, hd))
      send[j].slice(2, c.local, c.local + c.width).copy_from(qkv.slice(2, c.global, c.global + c.width));
  comm::all_to_all(group_, send, recv, kTag);
  Tensor qkv_heads = ctx.empty({B, T, width}, qkv.dtype());
  place_rows(qkv_heads, recv);

  Tensor y_heads = ctx.empty({B, T, heads * hd}, qkv.dtype()), lse = ctx.empty({B, heads, T});
  ops::attention_forward(y_heads, lse, qkv_heads, options(int(heads), int(kv_heads), causal_, ctx));

  // Head split -> sequence split: rank j's outputs are columns [j H' hd, (j + 1) H' hd) of y.
  std::vector<Tensor> back = rows_by_rank(y_heads, ctx), mine = empties(N, {B, local, heads * hd}, qkv.dtype(), ctx);
  comm::all_to_all(group_, back, mine, kTag);
  Tensor y = ctx.empty({B, local, n_head_ * hd}, qkv.dtype());
  for (int j = 0; j < N; ++j) y.slice(2, j * heads * hd, (j + 1) * heads * hd).copy_from(mine[j]);
  ctx.saved = {qkv_heads, y_heads, lse};
  return y;
}

Tensor UlyssesSelfAttention::backward(const Tensor& dy, Context& ctx) {
  const Tensor &qkv_heads = ctx.saved.at(0), &y_heads = ctx.saved.at(1), &lse = ctx.saved.at(2);
  const int N = group_.size();
  const std::int64_t B = dy.dim(0), local = dy.dim(1), T = local * N, heads = n_head_ / N;
  const std::int64_t hd = dy.dim(2) / n_head_, width = qkv_heads.dim(2);
  std::vector<Tensor> send = empties(N, {B, local, heads * hd}, dy.dtype(), ctx);
  std::vector<Tensor> recv = empties(N, {B, local, heads * hd}, dy.dtype(), ctx);
  for (int j = 0; j < N; ++j) send[j].copy_from(dy.slice(2, j * heads * hd, (j + 1) * heads * hd));
  comm::all_to_all(group_, send, recv, kTag);
  Tensor dy_heads = ctx.empty({B, T, heads * hd}, dy.dtype());
  place_rows(dy_heads, recv);

  Tensor dqkv_heads = ctx.empty(qkv_heads.shape(), qkv_heads.dtype());
  ops::attention_backward(dqkv_heads, dy_heads, qkv_heads, y_heads, lse,
                          options(int(heads), n_kv_head_ / N, causal_, ctx));

  std::vector<Tensor> back = rows_by_rank(dqkv_heads, ctx), mine = empties(N, {B, local, width}, dy.dtype(), ctx);
  comm::all_to_all(group_, back, mine, kTag);
  Tensor dqkv = ctx.empty({B, local, (n_head_ + 2 * n_kv_head_) * hd}, qkv_heads.dtype());
  for (int j = 0; j < N; ++j)
    for (const Columns& c : columns_of(j, hd))
      dqkv.slice(2, c.global, c.global + c.width).copy_from(mine[j].slice(2, c.local, c.local + c.width));
  ctx.saved.clear();
  return dqkv;
}

}  // namespace tidal::nn::sp
