// Runs the PyTorch reference (tests/oracle/reference.py under Debian's python3-torch) on
// tensors exported as safetensors, and returns its outputs.
#pragma once

#include "io/safetensors.h"

#include <string>
#include <vector>

namespace tidal::testing {

io::TensorMap run_oracle(const std::string& case_name, const io::TensorMap& inputs, const io::Metadata& meta = {});

// Runs tests/oracle/hf_reference.py under the Hugging Face venv (scripts/oracle-venv.sh):
// `command` with `args`, then (when inputs are given) IN and OUT safetensors; returns OUT.
io::TensorMap run_hf_reference(const std::string& command, const std::vector<std::string>& args,
                               const io::TensorMap& inputs = {}, const io::Metadata& meta = {});

}  // namespace tidal::testing
