#include "support/oracle.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

namespace tidal::testing {

io::TensorMap run_oracle(const std::string& case_name, const io::TensorMap& inputs, const io::Metadata& meta) {
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("tidal-oracle-{}-{}", ::getpid(), ::testing::UnitTest::GetInstance()->random_seed());
  std::filesystem::create_directories(dir);
  const std::string in = (dir / (case_name + ".in.safetensors")).string();
  const std::string out = (dir / (case_name + ".out.safetensors")).string();
  io::save_safetensors(in, inputs, meta);
  const std::string cmd = fmt::format("{} {} {} {} {}", TIDAL_PYTHON, TIDAL_ORACLE_SCRIPT, case_name, in, out);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) throw Error(fmt::format("reference '{}' failed (exit {}): {}", case_name, rc, cmd));
  io::TensorMap result = io::load_safetensors(out).tensors;
  std::filesystem::remove_all(dir);
  return result;
}

io::TensorMap run_hf_reference(const std::string& command, const std::vector<std::string>& args,
                               const io::TensorMap& inputs, const io::Metadata& meta) {
  if (!std::filesystem::exists(TIDAL_HF_PYTHON))
    throw Error(fmt::format("the Hugging Face oracle's python '{}' is missing: run scripts/oracle-venv.sh", TIDAL_HF_PYTHON));
  std::string cmd = fmt::format("{} {} {}", TIDAL_HF_PYTHON, TIDAL_HF_SCRIPT, command);
  for (const std::string& a : args) cmd += " " + a;
  if (inputs.empty()) {
    const int rc = std::system(cmd.c_str());
    if (rc != 0) throw Error(fmt::format("hf reference failed (exit {}): {}", rc, cmd));
    return {};
  }
  const auto dir = std::filesystem::temp_directory_path() / fmt::format("tidal-hf-{}-{}", ::getpid(), command);
  std::filesystem::create_directories(dir);
  const std::string in = (dir / "in.safetensors").string(), out = (dir / "out.safetensors").string();
  io::save_safetensors(in, inputs, meta);
  cmd += fmt::format(" {} {}", in, out);
  const int rc = std::system(cmd.c_str());
  if (rc != 0) throw Error(fmt::format("hf reference failed (exit {}): {}", rc, cmd));
  io::TensorMap result = io::load_safetensors(out).tensors;
  std::filesystem::remove_all(dir);
  return result;
}

}  // namespace tidal::testing
