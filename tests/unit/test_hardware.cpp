// Hardware files (sim/hardware.h): every shipped file reads, a written description reads back
// as the same figures, and a bad file is an error naming the file and the key.
#include "core/error.h"
#include "sim/hardware.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace tidal {
namespace {

namespace fs = std::filesystem;

std::string write(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() / ("tidal_test_hardware_" + name + ".toml");
  std::ofstream(p) << text;
  return p.string();
}

TEST(Hardware, ShippedFilesRead) {
  int files = 0;
  for (const auto& e : fs::directory_iterator(TIDAL_HARDWARE_DIR)) {
    SCOPED_TRACE(e.path().string());
    const sim::Hardware h = sim::load_hardware(e.path().string());
    EXPECT_FALSE(h.name.empty());
    EXPECT_GT(h.flops.at(DType::bf16), 0);
    EXPECT_GT(h.intra_node_collective.bandwidth, 0);
    ++files;
  }
  EXPECT_GE(files, 4);
  const sim::Hardware h100 = sim::load_hardware(std::string(TIDAL_HARDWARE_DIR) + "/h100-8x.toml");
  EXPECT_EQ(h100.device, Device::Kind::cuda);
  EXPECT_EQ(h100.devices_per_node, 8);
  EXPECT_DOUBLE_EQ(h100.flops.at(DType::bf16), 989e12);
  EXPECT_DOUBLE_EQ(h100.intra_node_pair.bandwidth, 370e9);
  EXPECT_DOUBLE_EQ(h100.intra_node_pair.latency, 3e-6);
  ASSERT_TRUE(h100.inter_node.has_value());
  EXPECT_DOUBLE_EQ(h100.inter_node->seconds(45e9), 1 + 12e-6);
  EXPECT_FALSE(sim::load_hardware(std::string(TIDAL_HARDWARE_DIR) + "/colossal-system-2.toml").inter_node);
  // The host's AdamW (memory.offload's states there): the H100 file's, assumed; none in the seeds'
  // systems' (the planner does not offer offload there); a CPU's host is its device.
  EXPECT_DOUBLE_EQ(h100.host_optimizer_bandwidth, 50e9);
  const sim::Hardware system2 = sim::load_hardware(std::string(TIDAL_HARDWARE_DIR) + "/colossal-system-2.toml");
  EXPECT_DOUBLE_EQ(system2.host_optimizer_bandwidth, 0);
  std::string cpu = sim::hardware_toml(system2);
  cpu.replace(cpu.find("\"cuda\""), 6, "\"cpu\"");
  cpu.replace(cpu.find("elementwise_gbps"), 0, "bf16_native = false\n");
  const sim::Hardware host_is_device = sim::load_hardware(write("host_is_device", cpu));
  EXPECT_DOUBLE_EQ(host_is_device.host_optimizer_bandwidth, host_is_device.optimizer_bandwidth);
  // A core per thread: the rates are each rank's whoever else computes.
  EXPECT_DOUBLE_EQ(h100.oversubscription, 1);
  EXPECT_DOUBLE_EQ(h100.sharing_speedup(1, 8), 1);
}

TEST(Hardware, WrittenFiguresReadBack) {
  sim::Hardware h{.name = "two cores \"here\"", .source = "measured", .device = Device::Kind::cpu,
                  .devices_per_node = 2, .device_memory = 12.5 * (1 << 30), .memory_bandwidth = 8.25e9,
                  .flops = {{DType::f32, 1.23e11}, {DType::bf16, 4.56e11}, {DType::f16, 7.5e10}},
                  .bf16_native = false,
                  .gemm_sizes = {{DType::f32, {{128, 2.5e10}, {256, 6e10}}}},
                  .attention_flops = {{DType::f32, 3e10}, {DType::bf16, 2e10}, {DType::f16, 1e10}},
                  .attention_sizes = {{DType::f32, {{64, 1e10}, {256, 2e10}}}},
                  .elementwise_bandwidth = {{DType::f32, 4.5e9}, {DType::bf16, 2e9}, {DType::f16, 1.5e9}},
                  .elementwise_sizes = {{DType::bf16, {{65536, 3e9}, {262144, 2.5e9}}}},
                  .optimizer_bandwidth = 6.5e9,
                  .oversubscription = 4,
                  .host_memory = 25.0 * (1 << 30), .host_device_bandwidth = 8.25e9, .host_optimizer_bandwidth = 3e9,
                  .disk_write = sim::Link{.bandwidth = 3e8, .latency = 2e-3, .sizes = {{1 << 26, 1.2e9}},
                                          .measured_at = 1 << 30},
                  .intra_node_pair = {.bandwidth = 3.5e9, .latency = 1.5e-6},
                  .intra_node_collective = {.bandwidth = 2.25e9, .latency = 4e-6,
                                            .sizes = {{1 << 20, 6e9}, {1 << 22, 4e9}}, .measured_at = 1 << 26},
                  .inter_node = std::nullopt};
  const sim::Hardware back = sim::load_hardware(write("round_trip", sim::hardware_toml(h)));
  EXPECT_EQ(back.name, h.name);
  EXPECT_EQ(back.source, h.source);
  EXPECT_EQ(back.device, h.device);
  EXPECT_EQ(back.devices_per_node, 2);
  EXPECT_DOUBLE_EQ(back.device_memory, h.device_memory);
  EXPECT_DOUBLE_EQ(back.memory_bandwidth, h.memory_bandwidth);
  for (const auto& [dtype, rate] : h.flops) EXPECT_NEAR(back.flops.at(dtype), rate, 1e-5 * rate);
  EXPECT_FALSE(back.bf16_native);
  EXPECT_NEAR(back.attention_flops.at(DType::bf16), 2e10, 1e5);
  EXPECT_NEAR(back.elementwise_bandwidth.at(DType::f32), 4.5e9, 1e3);
  EXPECT_NEAR(back.elementwise_bandwidth.at(DType::f16), 1.5e9, 1e3);
  // Elementwise ops by tensor size, as the GEMMs': the smallest's rate below it, log-interpolated
  // between, the rate at Hardware::kElementwiseElements (2^21) at and beyond it; no curve: that rate.
  EXPECT_NEAR(back.elementwise_rate(DType::bf16, 1000), 3e9, 1e3);
  EXPECT_NEAR(back.elementwise_rate(DType::bf16, 131072), 2.75e9, 1e3);
  EXPECT_NEAR(back.elementwise_rate(DType::bf16, 1 << 20), 2.5e9 - 0.5e9 * 2 / 3, 1e3);  // 2/3 of the way in log
  EXPECT_NEAR(back.elementwise_rate(DType::bf16, 1 << 24), 2e9, 1e3);
  EXPECT_NEAR(back.elementwise_rate(DType::f32, 1000), 4.5e9, 1e3);
  EXPECT_NEAR(back.optimizer_bandwidth, 6.5e9, 1e3);
  EXPECT_NEAR(back.host_optimizer_bandwidth, 3e9, 1e3);
  // 8 ranks' threads on a quarter as many cores: a rank runs up to 4 times its all-busy rate
  // while fewer compute (processor sharing), never faster than its own threads.
  EXPECT_DOUBLE_EQ(back.oversubscription, 4);
  EXPECT_DOUBLE_EQ(back.sharing_speedup(8, 8), 1);
  EXPECT_DOUBLE_EQ(back.sharing_speedup(4, 8), 2);
  EXPECT_DOUBLE_EQ(back.sharing_speedup(1, 8), 4);
  EXPECT_DOUBLE_EQ(back.sharing_speedup(0.5, 8), 4);
  ASSERT_EQ(back.gemm_sizes.at(DType::f32).size(), 2u);
  EXPECT_NEAR(back.gemm_sizes.at(DType::f32)[1].second, 6e10, 1e4);
  // Between measured sizes the rate follows log(n); beyond them it reaches the peak.
  EXPECT_NEAR(back.gemm_rate(DType::f32, 128, 128, 128), 2.5e10, 1e4);
  EXPECT_NEAR(back.gemm_rate(DType::f32, 181.02, 181.02, 181.02), 4.25e10, 1e8);
  EXPECT_NEAR(back.gemm_rate(DType::f32, 8192, 8192, 8192), 1.23e11, 1e5);
  EXPECT_NEAR(back.gemm_rate(DType::bf16, 64, 64, 64), 4.56e11, 1e6);  // no curve: the peak
  // Attention's curve the same way, in keys, up to the rate measured at 1024 keys.
  ASSERT_EQ(back.attention_sizes.at(DType::f32).size(), 2u);
  EXPECT_NEAR(back.attention_rate(DType::f32, 32), 1e10, 1e4);
  EXPECT_NEAR(back.attention_rate(DType::f32, 128), 1.5e10, 1e4);
  EXPECT_NEAR(back.attention_rate(DType::f32, 512), 2.5e10, 1e4);
  EXPECT_NEAR(back.attention_rate(DType::f32, 4096), 3e10, 1e4);
  EXPECT_NEAR(back.attention_rate(DType::bf16, 64), 2e10, 1e4);  // no curve: the rate
  EXPECT_NEAR(back.intra_node_pair.bandwidth, 3.5e9, 1);
  EXPECT_NEAR(back.intra_node_collective.latency, 4e-6, 1e-12);
  // A link's bandwidth by message size as the rates': the smallest's below it, log(bytes) between,
  // the link's bandwidth from the size it was measured at; no sizes: that bandwidth for every message.
  EXPECT_NEAR(back.intra_node_collective.bandwidth_at(1000), 6e9, 1);
  EXPECT_NEAR(back.intra_node_collective.bandwidth_at(1 << 21), 5e9, 1e4);  // sizes written to 6 digits
  EXPECT_NEAR(back.intra_node_collective.bandwidth_at(1 << 24), (4e9 + 2.25e9) / 2, 1e4);
  EXPECT_NEAR(back.intra_node_collective.bandwidth_at(1 << 28), 2.25e9, 1);
  EXPECT_NEAR(back.intra_node_pair.bandwidth_at(1000), 3.5e9, 1);
  EXPECT_FALSE(back.inter_node);
  // A checkpoint's save (the disk): the commit's latency, then the node's bytes at their size's rate.
  ASSERT_TRUE(back.disk_write);
  EXPECT_NEAR(back.disk_write->seconds(1 << 26), 2e-3 + double(1 << 26) / 1.2e9, 1e-9);
  EXPECT_NEAR(back.disk_write->seconds(1 << 30), 2e-3 + double(1 << 30) / 3e8, 1e-6);
}

TEST(Hardware, BadFilesNameTheKey) {
  const std::string good = sim::hardware_toml(sim::load_hardware(std::string(TIDAL_HARDWARE_DIR) + "/h100-8x.toml"));
  const auto expect_error = [](const std::string& file, const std::string& words) {
    try {
      sim::load_hardware(file);
      ADD_FAILURE() << "no error for " << file;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << "the message names the file: " << e.what();
    }
  };
  std::string no_bf16 = good;
  no_bf16.replace(no_bf16.find("bf16 = "), 6, "bf17 =");
  expect_error(write("no_bf16", no_bf16), "'device.tflops.bf16' is missing");
  std::string negative = good;
  negative.replace(negative.find("memory_gbps = "), 14, "memory_gbps = -");
  expect_error(write("negative", negative), "'device.memory_gbps' must be a number above zero");
  std::string tpu = good;
  tpu.replace(tpu.find("\"cuda\""), 6, "\"tpu\"");
  expect_error(write("tpu", tpu), "'device.kind' is \"tpu\"");
  expect_error(write("not_toml", "name = [unclosed"), "not a hardware file");
  std::string shared = good;
  shared.replace(shared.find("[device]\n") + 9, 0, "oversubscription = 0.5\n");
  expect_error(write("undersubscribed", shared), "'device.oversubscription' is 0.5; it is 1 or more");
}

}  // namespace
}  // namespace tidal
