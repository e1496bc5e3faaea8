// How tensor parallelism splits the layers (parallel.tensor.mode): 1D (Megatron-LM), 2D
// (Optimus), 2.5D (Tesseract) or 3D; the names are the config's (config/choices.h).
#pragma once

namespace tidal::parallel {

enum class TensorMode { d1, d2, d2p5, d3 };

}  // namespace tidal::parallel
