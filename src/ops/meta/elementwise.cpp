// The meta backend's ops that cost no product (ops/meta/recorder.h): on meta tensors they do
// nothing - the tensors they write were allocated by their callers, and the planner times those
// as made (sim/step_replay.cpp) - except the copies the CPU backend makes of their operands.
#include "ops/bias.h"
#include "ops/cast.h"
#include "ops/class_token.h"
#include "ops/cross_entropy.h"
#include "ops/dropout.h"
#include "ops/embedding.h"
#include "ops/expert_rows.h"
#include "ops/fp8.h"
#include "ops/gelu.h"
#include "ops/grad_norm.h"
#include "ops/layernorm.h"
#include "ops/nf4.h"
#include "ops/meta/recorder.h"
#include "ops/optimizer_step.h"
#include "ops/patchify.h"
#include "ops/residual.h"
#include "ops/rms_norm.h"
#include "ops/rotary.h"
#include "ops/softmax.h"
#include "ops/split_norm.h"
#include "ops/swiglu.h"

namespace tidal::ops::meta {

void bias_add(Tensor&, const Tensor&) {}
void bias_grad(Tensor&, const Tensor&) {}
void cast(Tensor&, const Tensor&) {}
void nf4_dequantize(Tensor&, const Nf4Weight&, Nf4Tile) {}
void fp8_quantize(Tensor&, Tensor&, const Tensor&, Fp8Format, bool) {}
void prepend_token(Tensor&, const Tensor&, const Tensor&) {}
void prepend_token_backward(Tensor&, Tensor&, const Tensor&) {}
void select_token(Tensor&, const Tensor&, std::int64_t) {}
void select_token_backward(Tensor&, const Tensor&, std::int64_t) {}
void cross_entropy_forward(Tensor&, Tensor&, const Tensor&, const Tensor&) {}
void cross_entropy_backward(Tensor&, const Tensor&, const Tensor&, const Tensor&, float) {}
void cross_entropy_shard_targets(Tensor&, const Tensor&, std::int64_t, std::int64_t, std::int64_t) {}
void cross_entropy_shard_terms(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {}
void cross_entropy_shard_combine(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&) {}
void dropout_forward(Tensor&, const Tensor&, float, const DropoutKey&) {}
void dropout_backward(Tensor&, const Tensor&, float, const DropoutKey&) {}
void embedding_forward(Tensor&, const Tensor&, const Tensor&, bool) {}
void embedding_shard_ids(Tensor&, const Tensor&, std::int64_t, std::int64_t, std::int64_t) {}
void position_embedding_forward(Tensor&, const Tensor&, std::int64_t) {}
void position_embedding_backward(Tensor&, const Tensor&, std::int64_t) {}
void gather_rows(Tensor&, const Tensor&, const Tensor&, const Tensor&) {}
void combine_rows(Tensor&, const Tensor&, const Tensor&, const Tensor&) {}
void slot_dots(Tensor&, const Tensor&, const Tensor&, const Tensor&) {}
void split_norm_sums(Tensor&, const Tensor&, const SplitNormOptions&) {}
void split_norm_forward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const SplitNormOptions&) {}
void split_norm_weight_grads(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&) {}
void split_norm_grad_sums(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                          const SplitNormOptions&) {}
void split_norm_backward(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                         const SplitNormOptions&) {}
void gelu_forward(Tensor&, const Tensor&, GeluForm) {}
void gelu_backward(Tensor&, const Tensor&, const Tensor&, GeluForm) {}
void layernorm_forward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, float) {}
void layernorm_backward(Tensor&, Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                        const Tensor&) {}
void adamw_step(Tensor&, const Tensor&, Tensor&, Tensor&, const AdamWOptions&, std::int64_t, Tensor*) {}
void adamw_steps(std::vector<AdamWTensors>&, const AdamWOptions&, std::int64_t) {}
void sgd_step(Tensor&, const Tensor&, Tensor&, const SgdOptions&, bool) {}
void patchify(Tensor&, const Tensor&, std::int64_t) {}
void residual_add(Tensor&, const Tensor&, const Tensor&) {}
void accumulate(Tensor&, const Tensor&) {}
void scale(Tensor&, float) {}
void rms_norm_forward(Tensor&, Tensor&, const Tensor&, const Tensor&, float) {}
void rms_norm_backward(Tensor&, Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&) {}
void rotary_apply(Tensor&, const Tensor&, const Tensor&, const RotaryOptions&) {}
void softmax_forward(Tensor&, const Tensor&) {}
void softmax_backward(Tensor&, const Tensor&, const Tensor&) {}
void swiglu_forward(Tensor&, const Tensor&) {}
void swiglu_backward(Tensor&, const Tensor&, const Tensor&) {}

// ops/cpu/embedding.cpp sums a low-precision table's gradient in an fp32 copy.
void embedding_backward(Tensor& dtable, const Tensor&, const Tensor&) {
  Tensor sums;
  const Recorder* r = recorder();
  if (r != nullptr && r->backend.cpu && dtable.dtype() != DType::f32) sums = workspace(dtable.shape());
}

double sum_of_squares(const Tensor&) { return 0.0; }

}  // namespace tidal::ops::meta
