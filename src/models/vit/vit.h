// ViT (Dosovitskiy et al., ViT-B style): non-overlapping patches flattened and projected by a
// Linear (= a stride-P convolution), a learned class token, learned positions, pre-LN blocks,
// final LayerNorm, and a linear classifier on the class token.
#pragma once

#include "models/model.h"
#include "nn/layer_factory.h"
#include "ops/gelu.h"

namespace tidal::models {

struct VitConfig {
  int n_layer = 12;
  int n_head = 12;
  std::int64_t n_embd = 768;
  std::int64_t image_size = 224;
  std::int64_t patch_size = 16;
  std::int64_t channels = 3;
  std::int64_t num_classes = 1000;
  float dropout = 0.0f;
  float ln_eps = 1e-6f;
  ops::GeluForm activation = ops::GeluForm::tanh;  // the MLP's GELU (HF: gelu_new = tanh, gelu = erf)
  float init_std = 0.02f;
  nn::CheckpointPolicy checkpointing{};  // activation checkpointing of the blocks
};

std::unique_ptr<Model> make_vit(const VitConfig& cfg, nn::LayerFactory& layers = nn::single_device_layers());

}  // namespace tidal::models
