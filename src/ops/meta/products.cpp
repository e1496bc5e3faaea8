// The meta backend's products (ops/meta/recorder.h): GEMMs and attention, whose work the recorder
// hears, with the fp32 copies of their operands the CPU backend makes where it widens.
#include "ops/attention.h"
#include "ops/fp8.h"
#include "ops/gemm.h"
#include "ops/meta/recorder.h"
#include "ops/ring_attention.h"

#include <vector>

namespace tidal::ops::meta {
namespace {

// The fp32 copies of the operands that are not fp32 already, held until the op returns.
std::vector<Tensor> widened(std::initializer_list<const Tensor*> operands) {
  std::vector<Tensor> copies;
  for (const Tensor* t : operands)
    if (t->dtype() != DType::f32) copies.push_back(workspace(t->shape()));
  return copies;
}

// The share of a ring's block this rank's queries compute (before the batch's masks, which meta
// tensors do not hold): on a CPU the kernels' tiles, each to its last query's key; on a GPU the
// visible pairs. A rank's blocks differ (without zig-zag places the last rank sees every block
// whole, the first only its own diagonal), and the ring's lock step waits for the slowest.
double ring_share(const Recorder& r, const RingAttentionOptions& opt, std::int64_t first_key, std::int64_t Tq,
                  std::int64_t Tk) {
  return r.backend.cpu ? cpu::ring_work_share(opt.causal, opt.first_query, first_key, Tq, Tk)
                       : visible_share(opt.causal, opt.first_query, first_key, Tq, Tk);
}

}  // namespace

// ops/cpu/gemm.cpp: bf16 pairs on oneDNN where the CPU has bf16 instructions, everything else
// on fp32 copies.
void gemm(Tensor& c, const Tensor& a, const Tensor& b, const GemmOptions& opt) {
  const GemmDims d = gemm_dims(c, a, b, opt);
  Recorder* r = recorder();
  if (r == nullptr) return;
  const bool onednn = a.dtype() == DType::bf16 && b.dtype() == DType::bf16 && r->backend.bf16_native;
  const std::vector<Tensor> copies = r->backend.cpu && !onednn ? widened({&a, &b, &c}) : std::vector<Tensor>();
  r->gemm(c.dtype(), d.m, d.n, d.k, d.batch);
}

// fp8 GEMMs are timed at the bf16 rate: the hardware files hold no fp8 rate yet.
void gemm_fp8(Tensor& c, const Tensor& a, const Tensor& a_scale_inv, Fp8Format, const Tensor& b,
              const Tensor& b_scale_inv, Fp8Format, float) {
  const Fp8GemmDims d = fp8_gemm_dims(c, a, a_scale_inv, b, b_scale_inv);
  if (Recorder* r = recorder()) r->gemm(DType::bf16, d.m, d.n, d.k, 1);
}

// Two products over the visible keys forward (QK^T, PV); backward makes the scores again and takes
// four more. The CPU's kernels compute whole blocks of queries up to each block's last key
// (ops::cpu::causal_work_share); the GPU's, the visible half.
namespace {
void attention_work(const Tensor& qkv, const Tensor& lse, const AttentionOptions& opt, double times) {
  const AttentionDims d = attention_dims(qkv, lse, opt);
  Recorder* r = recorder();
  if (r == nullptr) return;
  const double share = !opt.causal ? 1.0 : r->backend.cpu ? cpu::causal_work_share(d.T) : 0.5;
  r->attention(qkv.dtype(), times * 4.0 * double(d.B) * double(d.T) * double(d.T) * double(d.C) * share, d.T);
}
}  // namespace

void attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionOptions& opt) {
  std::vector<Tensor> copies;
  if (cpu_widens(qkv.dtype())) copies = widened({&y, &qkv});  // ops/cpu/attention.cpp
  attention_work(qkv, lse, opt, 1.0);
}

void attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                        const AttentionOptions& opt) {
  std::vector<Tensor> copies;
  if (cpu_widens(qkv.dtype())) copies = widened({&dqkv, &dy, &qkv, &y});
  attention_work(qkv, lse, opt, 2.5);
}

// A ring's block: this rank's queries against the block's keys.
void ring_attention_forward(Tensor& y, Tensor& lse, Tensor& sum, const Tensor& q, const Tensor& kv,
                            std::int64_t first_key, const RingAttentionOptions& opt) {
  const RingAttentionDims d = check_ring_forward(y, lse, sum, q, kv, first_key, opt, Device::Kind::meta);
  if (Recorder* r = recorder()) {
    const std::int64_t Tk = kv.dim(1);
    const double share = ring_share(*r, opt, first_key, d.Tq, Tk);
    r->attention(q.dtype(), 4.0 * double(d.B) * double(d.Tq) * double(Tk) * double(d.C) * share, Tk);
  }
}

void ring_attention_finish(Tensor& y, Tensor& lse, const Tensor& sum, const RingAttentionOptions& opt) {
  check_ring_finish(y, lse, sum, opt, Device::Kind::meta);
}

void ring_attention_backward(Tensor& dq, Tensor& dkv, const Tensor& q, const Tensor& kv, const Tensor& y,
                             const Tensor& dy, const Tensor& lse, std::int64_t first_key,
                             const RingAttentionOptions& opt) {
  const RingAttentionDims d = check_ring_backward(dq, dkv, q, kv, y, dy, lse, first_key, opt, Device::Kind::meta);
  if (Recorder* r = recorder()) {
    const std::int64_t Tk = kv.dim(1);
    const double share = ring_share(*r, opt, first_key, d.Tq, Tk);
    r->attention(q.dtype(), 2.5 * 4.0 * double(d.B) * double(d.Tq) * double(Tk) * double(d.C) * share, Tk);
  }
}

}  // namespace tidal::ops::meta
