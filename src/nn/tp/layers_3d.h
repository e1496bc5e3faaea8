// The 3D layer factory (colossal-ai.txt sec. III-A "3D", after Agarwal et al.'s 3D matrix
// multiplication): the tensor group is an l x l x l cube of ranks (x, y, z). A linear Y = X W^T
// on rank (a, b, c) multiplies X's block (a, b) by W's block (b, c): X is stored split over c and
// all-gathered along it, W is stored split over a and all-gathered along it, and the partial
// products are reduce-scattered over b. So X is [B / l^2, T, in / l] and W [out / l^2, in / l]
// per rank ([P / N^(2/3), Q / N^(1/3)] in the paper's notation), nothing is replicated, and one
// linear moves 2 (l-1)/l (Sx + Sw + Sy) elements forward and backward (Table I).
//
// The output's samples are split over b where the input's were split over c, so a linear
// swaps two axes of the layout. Hidden states H use orientation A (samples over (x, z), features
// over y); input_linear goes A -> B (samples over (x, y), features over z: F); output_linear
// goes B -> A. hidden_linear (H -> H) is a linear followed by the exchange of blocks between
// ranks (x, y, z) and (x, z, y).
#pragma once

#include "nn/layer_factory.h"
#include "parallel/context.h"

namespace tidal::nn::tp {

// keep_gathered: a linear keeps its gathered input X_ab for backward instead of gathering it again.
std::unique_ptr<LayerFactory> layers_3d(parallel::ParallelContext& pc, bool keep_gathered);

}  // namespace tidal::nn::tp
