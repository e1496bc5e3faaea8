#include "models/llama/decoder.h"

#include "nn/router.h"
#include "ops/bias.h"
#include "ops/gemm.h"
#include "ops/residual.h"
#include "ops/rms_norm.h"
#include "ops/rotary.h"
#include "ops/swiglu.h"

#include <fmt/format.h>

#include <cmath>

namespace tidal::models {
namespace {

// y [1, out] = x [1, in] w^T (+ b), w [out, in].
void llama_linear(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  ops::gemm(y, x, w, {.trans_b = true});
  if (b.defined()) ops::bias_add(y, b);
}

}  // namespace

LlamaDecoder::LlamaDecoder(Model& model, const LlamaConfig& cfg, std::int64_t max_positions)
    : C_(cfg.n_embd), V_(cfg.vocab_size), P_(max_positions), I_(cfg.intermediate_size), hd_(cfg.n_embd / cfg.n_head),
      n_head_(cfg.n_head), n_kv_head_(cfg.n_kv_head ? cfg.n_kv_head : cfg.n_head), eps_(cfg.rms_eps),
      inv_freq_(ops::rotary_inverse_frequencies(hd_, cfg.rotary.theta, cfg.rotary.scaling)) {
  TIDAL_ASSERT(n_head_ % n_kv_head_ == 0 && hd_ * n_head_ == C_, "{} heads, {} kv heads, width {}", n_head_,
               n_kv_head_, C_);
  const std::int64_t qkv_rows = (n_head_ + 2 * n_kv_head_) * hd_, kv = n_kv_head_ * hd_;
  wte_ = host_weight(model, "wte.weight", {V_, C_});
  head_ = cfg.tie_embeddings ? wte_ : host_weight(model, "lm_head.weight", {V_, C_});
  ln_f_w_ = host_weight(model, "ln_f.weight", {C_});
  Allocator& host = host_allocator();
  const bool moe = cfg.moe.experts > 0;
  moe_ = cfg.moe;
  const std::int64_t Ie = cfg.moe.expert_hidden, Is = cfg.moe.shared_hidden;
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string b = fmt::format("blocks.{}.", l);
    blocks_.push_back({.ln_1_w = host_weight(model, b + "ln_1.weight", {C_}),
                       .qkv_w = host_weight(model, b + "attn.qkv.weight", {qkv_rows, C_}),
                       .qkv_b = cfg.qkv_bias ? host_weight(model, b + "attn.qkv.bias", {qkv_rows}) : Tensor{},
                       .proj_w = host_weight(model, b + "attn.proj.weight", {C_, C_}),
                       .proj_b = cfg.proj_bias ? host_weight(model, b + "attn.proj.bias", {C_}) : Tensor{},
                       .ln_2_w = host_weight(model, b + "ln_2.weight", {C_}),
                       .fc_w = moe ? Tensor{} : host_weight(model, b + "mlp.fc.weight", {2 * I_, C_}),
                       .down_w = moe ? Tensor{} : host_weight(model, b + "mlp.proj.weight", {C_, I_}),
                       .k_cache = Tensor::empty({P_, kv}, DType::f32, host),
                       .v_cache = Tensor::empty({P_, kv}, DType::f32, host)});
    if (!moe) continue;
    Block& block = blocks_.back();
    block.router_w = host_weight(model, b + "mlp.gate.weight", {cfg.moe.experts, C_});
    for (int e = 0; e < cfg.moe.experts; ++e) {
      const std::string x = fmt::format("{}mlp.experts.{}.", b, e);
      block.expert_fc.push_back(host_weight(model, x + "fc.weight", {2 * Ie, C_}));
      block.expert_down.push_back(host_weight(model, x + "proj.weight", {C_, Ie}));
    }
    if (Is > 0) {
      block.shared_fc = host_weight(model, b + "mlp.shared_expert.fc.weight", {2 * Is, C_});
      block.shared_down = host_weight(model, b + "mlp.shared_expert.proj.weight", {C_, Is});
      block.shared_gate_w = host_weight(model, b + "mlp.shared_expert_gate.weight", {1, C_});
    }
  }
  if (moe) {
    router_ = Tensor::empty({1, cfg.moe.experts}, DType::f32, host);
    expert_gate_up_ = Tensor::empty({1, 2 * Ie}, DType::f32, host);
    expert_h_ = Tensor::empty({1, Ie}, DType::f32, host);
    shared_gate_up_ = Tensor::empty({1, 2 * Is}, DType::f32, host);
    shared_h_ = Tensor::empty({1, Is}, DType::f32, host);
    expert_o_ = Tensor::empty({1, C_}, DType::f32, host);
  }
  x_ = Tensor::empty({1, C_}, DType::f32, host);
  a_ = Tensor::empty({1, C_}, DType::f32, host);
  qkv_ = Tensor::empty({1, 1, qkv_rows}, DType::f32, host);
  y_ = Tensor::empty({1, C_}, DType::f32, host);
  o_ = Tensor::empty({1, C_}, DType::f32, host);
  gate_up_ = Tensor::empty({1, 2 * I_}, DType::f32, host);
  h_ = Tensor::empty({1, I_}, DType::f32, host);
  rstd_ = Tensor::empty({1}, DType::f32, host);
  cos_ = Tensor::empty({1, hd_ / 2}, DType::f32, host);
  sin_ = Tensor::empty({1, hd_ / 2}, DType::f32, host);
  logits_ = Tensor::empty({1, V_}, DType::f32, host);
  scores_.resize(std::size_t(P_));
}

void LlamaDecoder::step(std::int32_t token, std::int64_t t) {
  std::copy_n(wte_.data<float>() + token * C_, C_, x_.data<float>());
  ops::rotary_tables(cos_, sin_, inv_freq_, t);
  const std::int64_t q = n_head_ * hd_, kv = n_kv_head_ * hd_;
  Tensor qkv2 = qkv_.reshape({1, q + 2 * kv});
  for (Block& b : blocks_) {
    // x += proj(attention(rotate(qkv(rms_norm_1(x)))))
    ops::rms_norm_forward(a_, rstd_, x_, b.ln_1_w, eps_);
    llama_linear(qkv2, a_, b.qkv_w, b.qkv_b);
    ops::rotary_apply(qkv_, cos_, sin_, {.n_head = n_head_, .n_kv_head = n_kv_head_});
    const float* qkv = qkv_.data<float>();
    std::copy(qkv + q, qkv + q + kv, b.k_cache.data<float>() + t * kv);
    std::copy(qkv + q + kv, qkv + q + 2 * kv, b.v_cache.data<float>() + t * kv);
    attend_cached(qkv, b.k_cache.data<float>(), b.v_cache.data<float>(), t, n_head_, n_kv_head_, hd_,
                  scores_.data(), y_.data<float>());
    llama_linear(o_, y_, b.proj_w, b.proj_b);
    ops::accumulate(x_, o_);
    // x += down(swiglu(fc(rms_norm_2(x))))
    ops::rms_norm_forward(a_, rstd_, x_, b.ln_2_w, eps_);
    if (moe_.experts > 0) mixture(b);
    else swiglu_mlp(o_, b.fc_w, b.down_w, gate_up_, h_);
    ops::accumulate(x_, o_);
  }
  logits_ready_ = false;
}

void LlamaDecoder::swiglu_mlp(Tensor& out, const Tensor& fc, const Tensor& down, Tensor& gate_up, Tensor& h) {
  ops::gemm(gate_up, a_, fc, {.trans_b = true});
  ops::swiglu_forward(h, gate_up);
  ops::gemm(out, h, down, {.trans_b = true});
}

// The token's k experts' outputs summed by the router's weights, plus the gated shared expert's.
void LlamaDecoder::mixture(const Block& b) {
  ops::gemm(router_, a_, b.router_w, {.trans_b = true});
  const nn::Routing r = nn::route(router_.data<float>(), 1,
                                  {.experts = moe_.experts, .top_k = moe_.experts_per_token,
                                   .normalize = moe_.normalize_top_k});
  float* o = o_.data<float>();
  const float* e_o = expert_o_.data<float>();
  std::fill_n(o, C_, 0.0f);
  for (std::size_t j = 0; j < r.expert.size(); ++j) {
    const std::size_t e = std::size_t(r.expert[j]);
    swiglu_mlp(expert_o_, b.expert_fc[e], b.expert_down[e], expert_gate_up_, expert_h_);
    for (std::int64_t c = 0; c < C_; ++c) o[c] += r.weight[j] * e_o[c];
  }
  if (!b.shared_fc.defined()) return;
  swiglu_mlp(expert_o_, b.shared_fc, b.shared_down, shared_gate_up_, shared_h_);
  float g = 0.0f;
  for (std::int64_t c = 0; c < C_; ++c) g += a_.data<float>()[c] * b.shared_gate_w.data<float>()[c];
  g = 1.0f / (1.0f + std::exp(-g));
  for (std::int64_t c = 0; c < C_; ++c) o[c] += g * e_o[c];
}

Tensor LlamaDecoder::logits() {
  TIDAL_ASSERT(positions() > 0, "logits before any token was fed");
  if (!logits_ready_) {
    ops::rms_norm_forward(a_, rstd_, x_, ln_f_w_, eps_);
    ops::gemm(logits_, a_, head_, {.trans_b = true});
    logits_ready_ = true;
  }
  return logits_.reshape({V_});
}

}  // namespace tidal::models
