// How tensor parallelism splits the layers (parallel.tensor.mode): 1D (Megatron-LM), 2D
// (Optimus), 2.5D (Tesseract) or 3D, with the config's names for them (config/choices.h reads
// them from here).
#pragma once

#include <string_view>
#include <utility>

namespace tidal::parallel {

enum class TensorMode { d1, d2, d2p5, d3 };

inline constexpr std::pair<TensorMode, std::string_view> kTensorModeNames[] = {
    {TensorMode::d1, "1d"}, {TensorMode::d2, "2d"}, {TensorMode::d2p5, "2.5d"}, {TensorMode::d3, "3d"}};

constexpr std::string_view tensor_mode_name(TensorMode mode) {
  for (const auto& [m, name] : kTensorModeNames)
    if (m == mode) return name;
  return "?";
}

}  // namespace tidal::parallel
