// The rotary embeddings' host side (ops/rotary.h): the inverse frequencies, with Llama 3's
// scaling, and the cos/sin tables over a span of positions. Backend-independent: the tables are
// made once on the host and copied to the device that applies them.
//
// Both follow Hugging Face transformers (LlamaRotaryEmbedding in 4.40; _compute_llama3_parameters
// in modeling_rope_utils.py from 4.43), rounding to fp32 where it does, because the angle
// p * inv_freq magnifies an ulp of inv_freq p times: one ulp off at position 9000 moves a cos by
// up to 1e-3. transformers computes 1 / theta^e with e = 2i/hd rounded to fp32, theta^e rounded
// to fp32 and the reciprocal in fp32; this file takes each step in double and rounds where torch
// does, which reproduces torch's inv_freq bit for bit for hd 64 and 128 at theta 1e4 and 5e5
// (one value in a hundred differs by an ulp elsewhere, torch's fp32 pow being within an ulp);
// one rounding of the exact value would differ by an ulp in a third of them. Llama 3's scaling
// is computed in double from the fp32 frequency and rounded once; torch's fp32 steps differ from
// it in the blended band by an ulp at Llama 3.1's and 3.2's settings (8 at worst over the settings
// tried). The angles are the fp32 products torch forms; their cos and sin are correctly rounded
// (torch's vectorised fp32 cos is an ulp away from that in ~6% of a Llama 3 table).
#include "ops/rotary.h"

#include "core/error.h"
#include "ops/rotary_layout.h"

#include <cmath>
#include <numbers>

namespace tidal::ops {
namespace {

// Llama 3's rule for one frequency (transformers' _compute_llama3_parameters): wavelengths
// longer than the original context's low-frequency bound are stretched `factor` times (slowed
// down), those shorter than its high-frequency bound kept, and the band between blended.
double llama3_scaled(double inv_freq, const RopeScaling& s) {
  const double old_context = double(s.original_max_positions);
  const double low_freq_wavelen = old_context / double(s.low_freq_factor);
  const double high_freq_wavelen = old_context / double(s.high_freq_factor);
  const double wavelen = 2.0 * std::numbers::pi / inv_freq;
  if (wavelen < high_freq_wavelen) return inv_freq;
  if (wavelen > low_freq_wavelen) return inv_freq / double(s.factor);
  const double smooth =
      (old_context / wavelen - double(s.low_freq_factor)) / (double(s.high_freq_factor) - double(s.low_freq_factor));
  return (1.0 - smooth) * inv_freq / double(s.factor) + smooth * inv_freq;
}

}  // namespace

std::vector<float> rotary_inverse_frequencies(std::int64_t head_dim, double theta, const RopeScaling& scaling) {
  TIDAL_CHECK(head_dim > 0 && head_dim % 2 == 0, "rotary embeddings need an even head dimension, got {}", head_dim);
  TIDAL_CHECK(theta > 1.0, "rope theta must be above 1 (Llama uses 10000 or 500000), got {}", theta);
  const bool scaled = scaling.factor > 0.0f;
  if (scaled) {
    TIDAL_CHECK(scaling.factor >= 1.0f, "rope scaling factor must be at least 1 (0 turns scaling off), got {}",
                scaling.factor);
    TIDAL_CHECK(scaling.low_freq_factor > 0.0f && scaling.high_freq_factor > scaling.low_freq_factor,
                "rope scaling needs 0 < low_freq_factor < high_freq_factor, got {} and {}", scaling.low_freq_factor,
                scaling.high_freq_factor);
    TIDAL_CHECK(scaling.original_max_positions > 0,
                "rope scaling's original_max_position_embeddings must be positive, got {}",
                scaling.original_max_positions);
  }
  std::vector<float> inv_freq(std::size_t(head_dim / 2));
  for (std::int64_t i = 0; i < head_dim / 2; ++i) {
    // 1.0 / (theta ** (torch.arange(0, hd, 2).float() / hd)): theta taken as fp32, and three
    // fp32 roundings.
    const float exponent = float(2 * i) / float(head_dim);
    const float power = float(std::pow(double(float(theta)), double(exponent)));
    const float f = 1.0f / power;
    // The scaling starts from the fp32 frequency, as transformers' does.
    inv_freq[std::size_t(i)] = scaled ? float(llama3_scaled(double(f), scaling)) : f;
  }
  return inv_freq;
}

void rotary_tables(Tensor& cos, Tensor& sin, const std::vector<float>& inv_freq, std::int64_t first) {
  const std::int64_t half = std::int64_t(inv_freq.size());
  for (const Tensor* t : {&cos, &sin})
    TIDAL_ASSERT(t->defined() && t->device().is_cpu() && t->is_contiguous() && t->dtype() == DType::f32 &&
                     t->ndim() == 2 && t->dim(1) == half,
                 "rotary_tables: cos and sin must be contiguous fp32 host tensors [T, {}], got {}", half,
                 t->defined() ? t->str() : "undefined");
  TIDAL_ASSERT(cos.shape() == sin.shape(), "rotary_tables cos {} vs sin {}", cos.str(), sin.str());
  TIDAL_ASSERT(first >= 0, "rotary_tables: first position {} is negative", first);
  const std::int64_t T = cos.dim(0);
  float* pc = cos.data<float>();
  float* ps = sin.data<float>();
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < half; ++i) {
      // position_ids.float() @ inv_freq.float(): one fp32 product (inner dimension 1), then its
      // cos and sin; taken in double here and rounded once, the correctly rounded fp32 value.
      const float angle = float(first + t) * inv_freq[std::size_t(i)];
      pc[t * half + i] = float(std::cos(double(angle)));
      ps[t * half + i] = float(std::sin(double(angle)));
    }
}

RotaryLayout rotary_layout(const Tensor& qkv, const Tensor& cos, const Tensor& sin, const RotaryOptions& opt) {
  TIDAL_ASSERT(opt.n_head > 0 && opt.n_kv_head > 0 && qkv.ndim() >= 2, "rotary_apply: qkv {} with {} q and {} kv heads",
               qkv.str(), opt.n_head, opt.n_kv_head);
  RotaryLayout l{};
  l.width = qkv.dim(-1);
  l.seq_len = qkv.dim(-2);
  l.rows = l.width == 0 ? 0 : qkv.numel() / l.width;
  const std::int64_t heads = std::int64_t(opt.n_head) + 2 * std::int64_t(opt.n_kv_head);
  const std::int64_t hd = l.width / heads;
  TIDAL_ASSERT(l.width % heads == 0 && hd % 2 == 0, "rotary_apply: qkv width {} is not {} heads of an even head dim",
               l.width, heads);
  l.half = hd / 2;
  l.rotated_heads = std::int64_t(opt.n_head) + std::int64_t(opt.n_kv_head);
  l.positions = nullptr;
  if (const Tensor* p = opt.positions) {
    std::vector<std::int64_t> dims = qkv.shape().vec();
    dims.pop_back();
    const Shape rows(dims);
    TIDAL_ASSERT(p->dtype() == DType::i32 && p->shape() == rows && p->is_contiguous() &&
                     p->device().kind == qkv.device().kind,
                 "rotary_apply: positions {} for qkv {}", p->str(), qkv.str());
    l.positions = p->data<std::int32_t>();
    l.seq_len = cos.ndim() == 2 ? cos.dim(0) : 0;
  }
  const Shape table{l.seq_len, l.half};
  TIDAL_ASSERT(cos.dtype() == DType::f32 && cos.shape() == table && sin.dtype() == DType::f32 && sin.shape() == table,
               "rotary_apply: cos {} and sin {} must be fp32 [{}, hd/2] = [{}, {}]", cos.str(), sin.str(),
               opt.positions ? "P" : "T", l.seq_len, l.half);
  return l;
}

}  // namespace tidal::ops
