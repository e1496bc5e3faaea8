#include "models/gpt/decoder.h"

#include "ops/gelu.h"
#include "ops/gemm.h"
#include "ops/layernorm.h"
#include "ops/residual.h"

#include <fmt/format.h>

namespace tidal::models {
namespace {

// y [1, out] = x [1, in] w^T + b, w [out, in].
void gpt_linear(Tensor& y, const Tensor& x, const Tensor& w, const Tensor& b) {
  ops::gemm(y, x, w, {.trans_b = true, .bias = &b});
}

}  // namespace

GptDecoder::GptDecoder(Model& model, const GptConfig& cfg)
    : C_(cfg.n_embd), V_(cfg.vocab_size), P_(cfg.max_positions ? cfg.max_positions : cfg.seq_len),
      n_head_(cfg.n_head), ln_eps_(cfg.ln_eps), activation_(cfg.activation) {
  TIDAL_ASSERT(n_head_ > 0 && C_ % n_head_ == 0, "n_embd {} over {} heads", C_, n_head_);
  wte_ = host_weight(model, "wte.weight", {V_, C_});
  wpe_ = host_weight(model, "wpe.weight", {P_, C_});
  head_ = cfg.tie_embeddings ? wte_ : host_weight(model, "lm_head.weight", {V_, C_});
  ln_f_w_ = host_weight(model, "ln_f.weight", {C_});
  ln_f_b_ = host_weight(model, "ln_f.bias", {C_});
  Allocator& host = host_allocator();
  for (int l = 0; l < cfg.n_layer; ++l) {
    const std::string b = fmt::format("blocks.{}.", l);
    blocks_.push_back({.ln_1_w = host_weight(model, b + "ln_1.weight", {C_}),
                       .ln_1_b = host_weight(model, b + "ln_1.bias", {C_}),
                       .qkv_w = host_weight(model, b + "attn.qkv.weight", {3 * C_, C_}),
                       .qkv_b = host_weight(model, b + "attn.qkv.bias", {3 * C_}),
                       .proj_w = host_weight(model, b + "attn.proj.weight", {C_, C_}),
                       .proj_b = host_weight(model, b + "attn.proj.bias", {C_}),
                       .ln_2_w = host_weight(model, b + "ln_2.weight", {C_}),
                       .ln_2_b = host_weight(model, b + "ln_2.bias", {C_}),
                       .fc_w = host_weight(model, b + "mlp.fc.weight", {4 * C_, C_}),
                       .fc_b = host_weight(model, b + "mlp.fc.bias", {4 * C_}),
                       .mlp_proj_w = host_weight(model, b + "mlp.proj.weight", {C_, 4 * C_}),
                       .mlp_proj_b = host_weight(model, b + "mlp.proj.bias", {C_}),
                       .k_cache = Tensor::empty({P_, C_}, DType::f32, host),
                       .v_cache = Tensor::empty({P_, C_}, DType::f32, host)});
  }
  x_ = Tensor::empty({1, C_}, DType::f32, host);
  a_ = Tensor::empty({1, C_}, DType::f32, host);
  qkv_ = Tensor::empty({1, 3 * C_}, DType::f32, host);
  y_ = Tensor::empty({1, C_}, DType::f32, host);
  o_ = Tensor::empty({1, C_}, DType::f32, host);
  fc_ = Tensor::empty({1, 4 * C_}, DType::f32, host);
  gelu_ = Tensor::empty({1, 4 * C_}, DType::f32, host);
  mean_ = Tensor::empty({1}, DType::f32, host);
  rstd_ = Tensor::empty({1}, DType::f32, host);
  logits_ = Tensor::empty({1, V_}, DType::f32, host);
  scores_.resize(std::size_t(P_));
}

void GptDecoder::step(std::int32_t token, std::int64_t t) {
  float* x = x_.data<float>();
  const float* tok = wte_.data<float>() + token * C_;
  const float* pos = wpe_.data<float>() + t * C_;
  for (std::int64_t c = 0; c < C_; ++c) x[c] = tok[c] + pos[c];
  for (Block& b : blocks_) {
    // x += proj(attention(ln_1(x)))
    ops::layernorm_forward(a_, mean_, rstd_, x_, b.ln_1_w, b.ln_1_b, ln_eps_);
    gpt_linear(qkv_, a_, b.qkv_w, b.qkv_b);
    const float* qkv = qkv_.data<float>();
    std::copy(qkv + C_, qkv + 2 * C_, b.k_cache.data<float>() + t * C_);
    std::copy(qkv + 2 * C_, qkv + 3 * C_, b.v_cache.data<float>() + t * C_);
    attend_cached(qkv, b.k_cache.data<float>(), b.v_cache.data<float>(), t, n_head_, n_head_, C_ / n_head_,
                  scores_.data(), y_.data<float>());
    gpt_linear(o_, y_, b.proj_w, b.proj_b);
    ops::accumulate(x_, o_);
    // x += proj(gelu(fc(ln_2(x))))
    ops::layernorm_forward(a_, mean_, rstd_, x_, b.ln_2_w, b.ln_2_b, ln_eps_);
    gpt_linear(fc_, a_, b.fc_w, b.fc_b);
    ops::gelu_forward(gelu_, fc_, activation_);
    gpt_linear(o_, gelu_, b.mlp_proj_w, b.mlp_proj_b);
    ops::accumulate(x_, o_);
  }
  logits_ready_ = false;
}

Tensor GptDecoder::logits() {
  TIDAL_ASSERT(positions() > 0, "logits before any token was fed");
  if (!logits_ready_) {
    ops::layernorm_forward(a_, mean_, rstd_, x_, ln_f_w_, ln_f_b_, ln_eps_);
    ops::gemm(logits_, a_, head_, {.trans_b = true});  // GPT-2's head has no bias
    logits_ready_ = true;
  }
  return logits_.reshape({V_});
}

}  // namespace tidal::models
