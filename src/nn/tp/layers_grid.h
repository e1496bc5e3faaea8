// The 2D (optimus-2d.txt) and 2.5D (Tesseract; colossal-ai.txt sec. III-A) layer factory. The
// tensor group is a q x q grid of ranks (i, j), repeated over d depth layers k (2D: d = 1).
//
//   hidden states H = F   [B / (d q), T, C / q]: samples block k q + i, features block j
//   weights W [out, in]   block (i, j): output rows block i, input columns block j, the same in
//                         every depth layer (its gradient summed over the depth group)
//   biases, LayerNorm     features block j, held by every row and depth layer (gradients summed
//                         over the column and depth groups)
//   token table [V, C]    block (i, j) like a weight; the tied head is a SUMMA product with it
//
// Every linear is a SUMMA product (nn/tp/summa.h) inside the rank's depth layer, so
// activations are split q*q*d ways, not replicated, and a weight is broadcast in q pieces
// instead of being stored whole.
#pragma once

#include "nn/layer_factory.h"
#include "parallel/context.h"

namespace tidal::nn::tp {

// keep_gathered (2.5D): every depth layer holds its weight blocks whole instead of one depth slice.
std::unique_ptr<LayerFactory> layers_grid(parallel::ParallelContext& pc, bool keep_gathered);

}  // namespace tidal::nn::tp
