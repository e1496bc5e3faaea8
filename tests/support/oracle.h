// Runs the PyTorch reference (tests/oracle/reference.py under Debian's python3-torch) on
// tensors exported as safetensors, and returns its outputs.
#pragma once

#include "io/safetensors.h"

#include <string>

namespace tidal::testing {

io::TensorMap run_oracle(const std::string& case_name, const io::TensorMap& inputs, const io::Metadata& meta = {});

}  // namespace tidal::testing
