// The MLP's GELU (model.activation): the tanh approximation (GPT-2's "gelu_new") or the exact erf
// form (BERT's and ViT's "gelu"); ops/gelu.h computes both.
#pragma once

namespace tidal::ops {

enum class GeluForm { tanh, erf };

}  // namespace tidal::ops
