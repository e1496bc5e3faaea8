// The cost model's step time where the ranks share too few cores (sim/hardware.h's
// oversubscription): a rank computing while others wait runs faster, by processor sharing, and
// the pipeline's schedule is simulated so. Checked against the closed forms of a pipeline that
// computes one stage at a time, and of data parallelism, where every rank computes at once.
// And under memory.offload: the chunk moves over the host link, AdamW where the states are; and
// the gradient reductions beside backward, all but the last bucket or group.
#include "config/config.h"
#include "ops/attention.h"
#include "ops/ring_attention.h"
#include "engine/planning/job.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"

#include <gtest/gtest.h>

namespace tidal {
namespace {

config::Config small_gpt(std::vector<std::string> more) {
  std::vector<std::string> sets = {"model.n_layer=4", "model.n_embd=256", "model.n_head=4", "model.seq_len=128",
                                   "model.vocab_size=512", "train.batch_size=8", "train.device=cpu"};
  sets.insert(sets.end(), more.begin(), more.end());
  return config::load_config("", sets);
}

// Two ranks on one node, their threads `oversubscription` to a core.
sim::Hardware two_ranks(double oversubscription) {
  sim::Hardware h;
  h.name = "two ranks";
  h.device = Device::Kind::cpu;
  h.devices_per_node = 2;
  h.device_memory = 8.0 * (1 << 30);
  h.host_memory = 16.0 * (1 << 30);
  h.memory_bandwidth = h.host_device_bandwidth = 5e9;
  h.optimizer_bandwidth = 4e9;
  h.bf16_native = false;
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    h.flops[dtype] = 5e10;
    h.attention_flops[dtype] = 2e10;
    h.elementwise_bandwidth[dtype] = 4e9;
  }
  h.intra_node_pair = {.bandwidth = 2e9, .latency = 2e-5};
  h.intra_node_collective = {.bandwidth = 1e9, .latency = 5e-6};
  h.oversubscription = oversubscription;
  return h;
}

double actions(const sim::StepTime& t) { return t.compute + t.memory + t.layer_comm; }

TEST(CostModelTime, PipelineStageAloneRunsOnTheSharedCores) {
  // GPipe over 2 stages with one micro-batch: one stage computes at a time, so on cores that both
  // ranks' threads oversubscribe twice over, each action runs at twice its all-busy rate.
  const config::Config cfg = small_gpt({"parallel.pipeline=2", "parallel.schedule=gpipe"});
  const sim::Hardware own = two_ranks(1), shared = two_ranks(2);
  const sim::StepTime a = engine::predict(cfg, 2, &own).time, b = engine::predict(cfg, 2, &shared).time;
  ASSERT_EQ(a.rank, b.rank);
  ASSERT_GT(actions(a), 0);
  EXPECT_NEAR(actions(b), actions(a) / 2, 1e-9 * actions(a));
  EXPECT_NEAR(b.gemm, a.gemm / 2, 1e-9 * a.gemm);
  // The busiest rank (the first stage) waits for the other stage's actions, now half as long,
  // and for the two messages between them, as long as before.
  EXPECT_LT(b.pipeline_wait, a.pipeline_wait);
  EXPECT_GT(b.pipeline_wait, a.pipeline_wait / 2);
  EXPECT_DOUBLE_EQ(a.after, b.after);
  EXPECT_DOUBLE_EQ(a.optimizer, b.optimizer);
}

TEST(CostModelTime, SteadyPipelineGainsOnlyInItsBubble) {
  // 1F1B over 4 micro-batches: in the steady phase both stages compute (the all-busy rates), in
  // the fill and drain one does (faster): the step is shorter, by less than half its actions.
  const config::Config cfg = small_gpt({"parallel.pipeline=2", "train.micro_batch_size=2"});
  const sim::Hardware own = two_ranks(1), shared = two_ranks(2);
  const sim::StepTime a = engine::predict(cfg, 2, &own).time, b = engine::predict(cfg, 2, &shared).time;
  EXPECT_LT(b.total(), a.total());
  EXPECT_LT(b.pipeline_wait, a.pipeline_wait);
  EXPECT_LT(actions(b), actions(a));
  EXPECT_GT(actions(b), actions(a) / 2 * (1 + 1e-6));
}

TEST(CostModelTime, EveryRankComputingRunsAtTheFilesRates) {
  // Data parallelism: both ranks compute at once, which is what the file's rates are measured as.
  const config::Config cfg = small_gpt({"parallel.data=2"});
  const sim::Hardware own = two_ranks(1), shared = two_ranks(2);
  const sim::StepTime a = engine::predict(cfg, 2, &own).time, b = engine::predict(cfg, 2, &shared).time;
  EXPECT_DOUBLE_EQ(a.total(), b.total());
  EXPECT_DOUBLE_EQ(a.compute, b.compute);
  // One rank alone of the two the file was measured for has the node's cores to itself.
  const sim::StepTime alone = engine::predict(small_gpt({}), 1, &shared).time;
  const sim::StepTime alone_own = engine::predict(small_gpt({}), 1, &own).time;
  EXPECT_NEAR(actions(alone), actions(alone_own) / 2, 1e-9 * actions(alone_own));
}

TEST(CostModelTime, ElementwiseOpsAtTheRateOfTheirDtypeAndSize) {
  // The tensors a step makes cost the elementwise rate of the compute precision (bf16 ops widen
  // each element and run slower per byte on a CPU), and of their size (a curve below 2^21 elements).
  const config::Config fp32 = small_gpt({}), bf16 = small_gpt({"train.precision=bf16"});
  const sim::Hardware h = two_ranks(1);
  sim::Hardware slow_bf16 = h;
  slow_bf16.elementwise_bandwidth[DType::bf16] /= 4;
  const double f = engine::predict(fp32, 1, &h).time.memory;
  // bf16 keeps its model data in chunks, whose gradient buffers stream at the memory's bandwidth
  // (below): 2 bytes zeroed and 4 cast into the param slot an element.
  const sim::Prediction bp = engine::predict(bf16, 1, &h);
  const double stream = 6 * double(bp.ranks[0].model_data.parameters) / h.memory_bandwidth;
  const double b = bp.time.memory - stream;
  ASSERT_GT(b, 0.0);
  EXPECT_DOUBLE_EQ(engine::predict(fp32, 1, &slow_bf16).time.memory, f);
  EXPECT_NEAR(engine::predict(bf16, 1, &slow_bf16).time.memory - stream, 4 * b, 1e-9 * b);
  // Every tensor of this model below a curve's one point: all at that point's rate.
  sim::Hardware cached = h;
  cached.elementwise_sizes[DType::f32] = {{1e12, 2 * h.elementwise_bandwidth.at(DType::f32)}};
  EXPECT_NEAR(engine::predict(fp32, 1, &cached).time.memory, f / 2, 1e-9 * f);
}

TEST(CostModelTime, ABackgroundSaveWaitsForItsFilesBeyondForwardAndBackwardNotForTheCommit) {
  // One process on a CPU: the state lies in host memory and the writer reads it in place, so the
  // step waits for no snapshot, only for the files' write beyond the next forward and backward
  // (before the update changes the state); the commit (the disk's latency) runs on the writer's
  // thread. A synchronous save waits for the write and the commit.
  const config::Config cfg = small_gpt({"checkpoint.async=true", "checkpoint.every=5"});
  sim::Hardware h = two_ranks(1);
  h.disk_write = sim::Link{.bandwidth = 1e9, .latency = 4e-3};
  const sim::Prediction fast = engine::predict(cfg, 1, &h);
  ASSERT_TRUE(fast.checkpoint.async);
  ASSERT_TRUE(fast.checkpoint.in_place);
  const double bytes = fast.checkpoint.bytes[0], overlap = fast.time.total() - fast.time.optimizer;
  ASSERT_GT(bytes, 12.0 * 4e5);  // weights and both moments of a model of 0.4M+ parameters
  EXPECT_NEAR(fast.checkpoint.write, 4e-3 + bytes / 1e9, 1e-12);
  EXPECT_DOUBLE_EQ(fast.checkpoint.sync_stall, fast.checkpoint.write);
  ASSERT_LT(bytes / 1e9, overlap);
  EXPECT_EQ(fast.checkpoint.async_stall, 0.0);
  // A disk slow enough that the files outlast forward and backward ten times over.
  h.disk_write->bandwidth = bytes / (10 * overlap);
  const sim::Prediction slow = engine::predict(cfg, 1, &h);
  EXPECT_NEAR(slow.checkpoint.async_stall, 9 * overlap, 1e-9 * overlap);
  EXPECT_NEAR(slow.checkpoint.sync_stall, 4e-3 + 10 * overlap, 1e-9 * overlap);
}

TEST(CostModelTime, ChunkedGradientsStreamAtTheMemorysBandwidth) {
  // The chunk keeper zeroes each parameter's gradient buffer for its backward (a memset) and
  // streams it into the chunks once done (memory/chunk_manager.cpp's store_gradient): plain
  // passes at the memory's bandwidth, per micro-batch - not tensors made at the elementwise ops'
  // rate. Doubling the bandwidth halves them alone.
  const sim::Hardware h = two_ranks(1);
  sim::Hardware fast = h;
  fast.memory_bandwidth *= 2;
  // The same machine with a GPU's kernels (the hardware planned for decides where the ops run).
  sim::Hardware gpu = h, fast_gpu = fast;
  gpu.device = fast_gpu.device = Device::Kind::cuda;
  const auto streamed = [&](const std::vector<std::string>& sets, int ranks, bool on_gpu = false) {
    const config::Config cfg = small_gpt(sets);
    const sim::Prediction slow = engine::predict(cfg, ranks, on_gpu ? &gpu : &h);
    const double params = double(slow.ranks[0].model_data.parameters);
    return 2 * (slow.time.memory - engine::predict(cfg, ranks, on_gpu ? &fast_gpu : &fast).time.memory) *
           h.memory_bandwidth / params;
  };
  // Bytes an element, summed over the micro-batches: one bf16 micro-batch zeroes 2 and casts its
  // gradient into the param slot (2 read, 2 written).
  EXPECT_NEAR(streamed({"train.precision=bf16"}, 1), 2 + 4, 1e-6);
  // On a GPU four bf16 micro-batches each add theirs into the fp32 grad list by way of an fp32
  // copy (2 zeroed; 2 read, 4 written; 4 + 4 read, 4 written).
  EXPECT_NEAR(streamed({"train.precision=bf16", "train.micro_batch_size=2"}, 1, true), 4 * (2 + 18), 1e-6);
  // In fp32 (ZeRO-1 on one rank keeps chunks) the add reads the gradient as it is.
  EXPECT_NEAR(streamed({"zero.stage=1", "train.micro_batch_size=2"}, 1, true), 4 * (4 + 12), 1e-6);
  // On the host the backward's products add into the grad list themselves (memory::sums_in_place):
  // nothing streams.
  EXPECT_NEAR(streamed({"train.precision=bf16", "train.micro_batch_size=2"}, 1), 0, 1e-6);
  EXPECT_NEAR(streamed({"zero.stage=1", "train.micro_batch_size=2"}, 1), 0, 1e-6);
  // Over two data ranks with one micro-batch the group is packed into a buffer for its sum (read,
  // written) and, unsharded, unpacked back (bf16: 2 zeroed, 4 cast, 4 packed, 4 unpacked).
  EXPECT_NEAR(streamed({"train.precision=bf16", "parallel.data=2", "train.batch_size=4"}, 2), 2 + 4 + 8, 1e-6);
  EXPECT_NEAR(streamed({"parallel.data=2", "zero.stage=1", "train.batch_size=4"}, 2), 4 + 8 + 8, 1e-6);
  // ZeRO-1 sums micro-batches in the grad list and copies its owned half of the reduced sums back
  // once a step (8 bytes an owned element); ZeRO-0 all-reduces the list where it lies. On the
  // host the sums are the products' own.
  EXPECT_NEAR(streamed({"parallel.data=2", "zero.stage=1", "train.micro_batch_size=1"}, 2, true), 4 * (4 + 12) + 8 / 2,
              1e-6);
  EXPECT_NEAR(streamed({"train.precision=bf16", "parallel.data=2", "train.micro_batch_size=1"}, 2, true), 4 * (2 + 18),
              1e-6);
  EXPECT_NEAR(streamed({"parallel.data=2", "zero.stage=1", "train.micro_batch_size=1"}, 2), 8 / 2, 1e-6);
  EXPECT_NEAR(streamed({"train.precision=bf16", "parallel.data=2", "train.micro_batch_size=1"}, 2), 0, 1e-6);
  // ZeRO-2 adds each micro-batch's into its chunk group's buffer in bf16, zeroed first (2; 2 + 2
  // read, 2 written), which the group reduce-scatters; the owned half of the sum is added into
  // the fp32 grad list as above (18 bytes an owned element).
  EXPECT_NEAR(streamed({"train.precision=bf16", "parallel.data=2", "zero.stage=2", "train.micro_batch_size=1"}, 2),
              4 * (2 + 8 + 18 / 2), 1e-6);
  // The tensor keeper's fp32 gradients are held all along: no stream.
  EXPECT_NEAR(streamed({"train.micro_batch_size=2"}, 1), 0, 1e-9);
}

TEST(CostModelTime, OffloadMovesOverTheHostLinkAndAdamWRunsWhereTheStatesAre) {
  // The static partition: every state on the host, so each step the whole param list goes down
  // (the gradients) and up (the updated parameters), and AdamW runs at the host's rate.
  sim::Hardware h = two_ranks(1);
  h.host_device_bandwidth = 2e9;
  h.host_optimizer_bandwidth = h.optimizer_bandwidth;
  const config::Config fixed = small_gpt({"memory.offload=static", "memory.device_limit=256MiB"});
  const sim::Prediction a = engine::predict(fixed, 1, &h);
  const sim::RankMemory& r = a.ranks[0];
  ASSERT_TRUE(r.model_data.offload);
  EXPECT_EQ(r.offload.host_state_chunks, r.model_data.state_chunks());
  EXPECT_EQ(r.offload.evictions, 0);
  EXPECT_DOUBLE_EQ(r.offload.bytes_each_way, double(r.model_data.param_bytes));
  EXPECT_DOUBLE_EQ(a.time.offload, 2 * double(r.model_data.param_bytes) / 2e9);
  h.host_optimizer_bandwidth = h.optimizer_bandwidth / 4;
  const sim::Prediction slow_host = engine::predict(fixed, 1, &h);
  EXPECT_NEAR(slow_host.time.optimizer, 4 * a.time.optimizer, 1e-9 * a.time.optimizer);
  EXPECT_TRUE(a.untimed.empty());

  // The dynamic partition with room for every state beside the params and activations: nothing
  // moves, and AdamW runs on the device whatever the host's rate.
  const config::Config dynamic = small_gpt({"memory.offload=chunk", "memory.device_limit=256MiB"});
  const sim::Prediction roomy = engine::predict(dynamic, 1, &h);
  EXPECT_EQ(roomy.ranks[0].offload.host_state_chunks, 0);
  EXPECT_DOUBLE_EQ(roomy.time.offload, 0);
  h.host_optimizer_bandwidth = h.optimizer_bandwidth;
  EXPECT_DOUBLE_EQ(roomy.time.optimizer, engine::predict(dynamic, 1, &h).time.optimizer);

  // A file that cannot time the host's AdamW says so rather than guess.
  h.host_optimizer_bandwidth = 0;
  const sim::Prediction untimed = engine::predict(fixed, 1, &h);
  EXPECT_NE(untimed.untimed.find("host.optimizer_gbps"), std::string::npos) << untimed.untimed;
  EXPECT_NE(untimed.json().value("untimed", std::string()), "");
}

TEST(CostModelTime, ChunkGroupsReduceBesideBackwardAllButTheLast) {
  // ZeRO-2 over 2 ranks in chunks of half a million elements: several communication groups, each
  // reduce-scattered while the backward of the groups before it runs (memory/chunk_manager.h:
  // one in flight), the last after backward. With a link fast enough to keep up, all but the
  // last group's share of the reduction hides, on a GPU and on a CPU (MPI's progress thread).
  sim::Hardware gpu = two_ranks(1);
  gpu.device = Device::Kind::cuda;
  gpu.intra_node_collective = {.bandwidth = 1e12, .latency = 1e-7};
  const config::Config cfg = small_gpt({"parallel.data=2", "zero.stage=2", "memory.chunk_size=500000"});
  const sim::Prediction p = engine::predict(cfg, 2, &gpu);
  const int groups = p.ranks[0].model_data.chunks_in_lists / 2;
  ASSERT_GE(groups, 3);
  const nlohmann::json& rs = p.ranks[0].traffic.at("data").at("reduce_scatter");
  const double reduction = rs.at("calls").get<double>() * gpu.intra_node_collective.latency +
                           rs.at("link_bytes").get<double>() / gpu.intra_node_collective.bandwidth;
  EXPECT_NEAR(p.time.hidden, (1 - 1.0 / groups) * reduction, 1e-9 * reduction);

  // A link faster on smaller messages (sim/hardware.h's sizes): each reduce-scatter at the
  // bandwidth of its own message, the largest of them here.
  sim::Hardware by_size = gpu;
  const double message = rs.at("link_bytes").get<double>() / rs.at("calls").get<double>();
  by_size.intra_node_collective.sizes = {{message, 4e12}};
  by_size.intra_node_collective.measured_at = 4 * message;
  const double faster = rs.at("calls").get<double>() * gpu.intra_node_collective.latency +
                        rs.at("link_bytes").get<double>() / 4e12;
  EXPECT_NEAR(engine::predict(cfg, 2, &by_size).time.hidden, (1 - 1.0 / groups) * faster, 1e-9 * faster);

  // With micro-batches each one's groups are reduced beside its own backward (a second group
  // buffer filling meanwhile): all but the last group's share of every micro-batch's hides.
  const sim::Prediction micro = engine::predict(
      small_gpt({"parallel.data=2", "zero.stage=2", "memory.chunk_size=500000", "train.micro_batch_size=2"}), 2, &gpu);
  const nlohmann::json& micro_rs = micro.ranks[0].traffic.at("data").at("reduce_scatter");
  EXPECT_EQ(micro_rs.at("calls").get<double>(), rs.at("calls").get<double>() * 2);  // 2 micro-batches a rank
  const double micro_reduction = micro_rs.at("calls").get<double>() * gpu.intra_node_collective.latency +
                                 micro_rs.at("link_bytes").get<double>() / gpu.intra_node_collective.bandwidth;
  EXPECT_NEAR(micro.time.hidden, (1 - 1.0 / groups) * micro_reduction, 1e-9 * micro_reduction);
  sim::Hardware cpu = gpu;
  cpu.device = Device::Kind::cpu;
  EXPECT_NEAR(engine::predict(cfg, 2, &cpu).time.hidden, (1 - 1.0 / groups) * reduction, 1e-9 * reduction);
}

TEST(CostModelTime, TheLastGradientBucketStartsAfterBackward) {
  // Data parallelism without chunks: the gradients' all-reduce in buckets of parallel.bucket_mb,
  // each launched once backward has made all its gradients (distributed/gradient_reducer.h). The
  // last holds the first parameters, which backward completes last: it starts after backward.
  sim::Hardware gpu = two_ranks(1);
  gpu.device = Device::Kind::cuda;
  gpu.intra_node_collective = {.bandwidth = 1e12, .latency = 1e-7};
  // The whole model in one bucket: nothing hides (measured on a CPU: 0.01505 s of 0.01510 s exposed).
  const sim::Prediction one = engine::predict(small_gpt({"parallel.data=2"}), 2, &gpu);
  ASSERT_FALSE(one.ranks[0].model_data.chunks);
  EXPECT_DOUBLE_EQ(one.time.hidden, 0.0);
  // Buckets of a quarter MiB: all but the last's share hides. The last holds the token and
  // position tables (512 x 256 and 128 x 256) and the first block's first LayerNorm (2 x 256),
  // the parameters backward completes last.
  const sim::Prediction many = engine::predict(small_gpt({"parallel.data=2", "parallel.bucket_mb=0.25"}), 2, &gpu);
  const nlohmann::json& ar = many.ranks[0].traffic.at("data").at("all_reduce");
  const double buckets = ar.at("calls").get<double>() - 2;  // beside the step's targets and loss
  ASSERT_GE(buckets, 8);
  const sim::Link& link = gpu.intra_node_collective;
  const auto all_reduce = [&](double calls, double elements) { return calls * 2 * link.latency + 4 * elements / link.bandwidth; };
  const double seconds = all_reduce(buckets, ar.at("elements").get<double>() - 2);
  const double last = all_reduce(1, (512 + 128 + 2) * 256);
  EXPECT_NEAR(many.time.hidden, seconds - last, 1e-9 * seconds);
}

TEST(CostModelTime, StagesZeroAndOneSumMicroBatchesLocallyAndReduceOnce) {
  // Chunk lists with micro-batches at stage 0: each rank adds its micro-batches' gradients into
  // its fp32 grad list and all-reduces that once, a call per communication group, beside the
  // last micro-batch's backward (DDP's no_sync); stage 1 reduce-scatters it once; stage 2 reduces
  // every micro-batch's, beside that micro-batch's backward.
  sim::Hardware gpu = two_ranks(1);
  gpu.device = Device::Kind::cuda;
  gpu.intra_node_collective = {.bandwidth = 1e12, .latency = 1e-7};
  const std::vector<std::string> base = {"parallel.data=2", "train.precision=bf16", "memory.chunk_size=500000",
                                         "train.micro_batch_size=1"};
  const sim::Prediction p = engine::predict(small_gpt(base), 2, &gpu);
  const sim::ModelDataBytes& md = p.ranks[0].model_data;
  const int groups = md.chunks_in_lists / 2;
  ASSERT_GE(groups, 3);
  const nlohmann::json& ar = p.ranks[0].traffic.at("data").at("all_reduce");
  // The step's targets and loss (2 calls of 4 elements' worth) beside the chunks' sums.
  EXPECT_EQ(ar.at("calls").get<double>(), groups + 2);
  EXPECT_EQ(ar.at("elements").get<double>(), double(md.chunks_in_lists) * double(md.chunk_elements) + 2);
  EXPECT_EQ(md.param_transient_bytes, 0);  // no group buffer: the grad list is summed where it lies
  const double chunk_sums = double(groups) * gpu.intra_node_collective.latency * 2 +
                            double(md.chunks_in_lists) * double(md.chunk_elements) * 4 / gpu.intra_node_collective.bandwidth;
  EXPECT_NEAR(p.time.hidden, (1 - 1.0 / groups) * chunk_sums, 1e-6 * chunk_sums);

  std::vector<std::string> stage1 = base, stage2 = base;
  stage1.push_back("zero.stage=1");
  stage2.push_back("zero.stage=2");
  const sim::Prediction one = engine::predict(small_gpt(stage1), 2, &gpu);
  EXPECT_EQ(one.ranks[0].traffic.at("data").at("reduce_scatter").at("calls").get<double>(), groups);
  EXPECT_GT(one.time.hidden, 0.0);
  // Its grad list is whole, the optimizer's states halved: 3 x 1/2 + 1 chunks' fp32 a chunk.
  EXPECT_EQ(one.ranks[0].model_data.optimizer_bytes, md.optimizer_bytes * 5 / 8);
  const sim::Prediction two = engine::predict(small_gpt(stage2), 2, &gpu);
  const double micro_batches = 8.0 / 2;  // small_gpt's batch over 2 ranks, one sample each
  const nlohmann::json& two_rs = two.ranks[0].traffic.at("data").at("reduce_scatter");
  EXPECT_EQ(two_rs.at("calls").get<double>(), groups * micro_batches);
  // Each micro-batch's groups reduced beside its own backward, all but the last group's share.
  const double reductions = two_rs.at("calls").get<double>() * gpu.intra_node_collective.latency +
                            two_rs.at("link_bytes").get<double>() / gpu.intra_node_collective.bandwidth;
  EXPECT_NEAR(two.time.hidden, (1 - 1.0 / groups) * reductions, 1e-6 * reductions);
}

TEST(CostModelTime, GridReplicaSumsRunBesideBackwardWithoutABuffer) {
  // A 2D grid of 4 ranks in bf16 chunks, no data parallelism: the blocks a row or column holds
  // whole (biases, norms) are summed over it a chunk at a time where they lie (no packed copy),
  // the first level's as each chunk's gradients complete in backward - hidden but for the last
  // group's share, on a GPU and on a CPU alike.
  sim::Hardware gpu = two_ranks(1);
  gpu.devices_per_node = 4;
  gpu.device = Device::Kind::cuda;
  gpu.intra_node_pair = gpu.intra_node_collective = {.bandwidth = 1e12, .latency = 1e-7};
  const config::Config cfg = small_gpt({"parallel.tensor.size=4", "parallel.tensor.mode=2d", "train.precision=bf16",
                                        "memory.chunk_size=70000"});
  const sim::Prediction p = engine::predict(cfg, 4, &gpu);
  const sim::ModelDataBytes& md = p.ranks[0].model_data;
  ASSERT_TRUE(md.chunks);
  EXPECT_EQ(md.param_transient_bytes, 0);
  double replica_calls = 0;
  for (const auto& [group, ops] : p.ranks[0].traffic.items())
    if (group != "tensor" && ops.contains("all_reduce")) replica_calls += ops.at("all_reduce").at("calls").get<double>();
  EXPECT_GT(replica_calls, 0);
  EXPECT_GT(p.time.hidden, 0.0);
  sim::Hardware cpu = gpu;
  cpu.device = Device::Kind::cpu;
  EXPECT_DOUBLE_EQ(engine::predict(cfg, 4, &cpu).time.hidden, p.time.hidden);

  // Over a slow link the sums share it with the layers' own collectives: they hide behind the
  // backward's ops only, never behind more than the step's compute and memory traffic. 2.5D of
  // depth 2 holding whole weight blocks: every block is summed over the depth.
  sim::Hardware slow = gpu;
  slow.devices_per_node = 8;
  slow.intra_node_pair = slow.intra_node_collective = {.bandwidth = 1e8, .latency = 1e-5};
  for (DType dtype : {DType::f32, DType::bf16, DType::f16}) {  // ops far faster than the link
    slow.flops[dtype] = 5e12;
    slow.attention_flops[dtype] = 2e12;
    slow.elementwise_bandwidth[dtype] = 4e11;
  }
  slow.memory_bandwidth = 4e11;
  const sim::Prediction q =
      engine::predict(small_gpt({"parallel.tensor.size=8", "parallel.tensor.mode=2.5d", "parallel.tensor.depth=2",
                              "parallel.tensor.keep_gathered=true", "train.precision=bf16", "memory.chunk_size=70000"}),
                   8, &slow);
  EXPECT_GT(q.time.hidden, 0.0);
  EXPECT_LE(q.time.hidden, q.time.compute + q.time.memory);
}

TEST(CostModelTime, CausalAttentionOnACpuCountsTheKernelsBlocks) {
  // The CPU kernels run each block of 64 queries to its last query's key: at 128 keys the blocks
  // compute 64 x 64 + 64 x 128 of the 128 x 128 scores, not half of them.
  EXPECT_DOUBLE_EQ(ops::cpu::causal_work_share(64), 1.0);
  EXPECT_DOUBLE_EQ(ops::cpu::causal_work_share(128), 0.75);
  EXPECT_DOUBLE_EQ(ops::cpu::causal_work_share(100), (64.0 * 64 + 36.0 * 100) / (100.0 * 100));
  EXPECT_DOUBLE_EQ(ops::cpu::causal_work_share(1024), 136.0 * 64 * 64 / (1024.0 * 1024));
  // GPT (causal) and BERT (not) of the same shape: attention's time in that ratio on a CPU; on a
  // GPU half, FlashAttention-2's count, at the rate its bench measures by it.
  const sim::Hardware cpu = two_ranks(1);
  const double gpt = engine::predict(small_gpt({}), 1, &cpu).time.attention;
  const double bert = engine::predict(small_gpt({"model.type=bert"}), 1, &cpu).time.attention;
  EXPECT_NEAR(gpt / bert, 0.75, 1e-12);
  sim::Hardware gpu = cpu;
  gpu.device = Device::Kind::cuda;
  EXPECT_NEAR(engine::predict(small_gpt({}), 1, &gpu).time.attention /
                  engine::predict(small_gpt({"model.type=bert"}), 1, &gpu).time.attention,
              0.5, 1e-12);
}


TEST(CostModelTime, RingAttentionCountsEachRanksBlocksAsItsKernelsRunThem) {
  // A block before every query computes whole, one after them nothing; on a CPU a diagonal block's
  // tiles as the whole attention's (one tile up to 64 queries); on a GPU its visible pairs.
  EXPECT_DOUBLE_EQ(ops::cpu::ring_work_share(true, 64, 0, 64, 64), 1.0);
  EXPECT_DOUBLE_EQ(ops::cpu::ring_work_share(true, 0, 64, 64, 64), 0.0);
  EXPECT_DOUBLE_EQ(ops::cpu::ring_work_share(true, 32, 32, 32, 32), 1.0);
  EXPECT_DOUBLE_EQ(ops::cpu::ring_work_share(true, 128, 128, 128, 128), ops::cpu::causal_work_share(128));
  EXPECT_DOUBLE_EQ(ops::cpu::ring_work_share(false, 0, 64, 64, 64), 1.0);
  EXPECT_DOUBLE_EQ(ops::visible_share(true, 4, 4, 4, 4), 10.0 / 16);
  EXPECT_DOUBLE_EQ(ops::visible_share(true, 4, 0, 4, 4), 1.0);
  EXPECT_DOUBLE_EQ(ops::visible_share(true, 0, 4, 4, 4), 0.0);
  EXPECT_DOUBLE_EQ(ops::visible_share(true, 2, 0, 4, 4), (3.0 + 4 + 4 + 4) / 16);
  // Against a count of every query's visible keys, blocks before, across and after the queries.
  for (std::int64_t first_query : {0, 5, 16, 40})
    for (std::int64_t first_key : {0, 3, 16, 24, 64})
      for (std::int64_t Tq : {1, 7, 16})
        for (std::int64_t Tk : {1, 8, 16}) {
          double seen = 0;
          for (std::int64_t i = 0; i < Tq; ++i) {
            const ops::KeySpan keys = ops::visible_keys(true, ops::Documents{}, first_query, first_key, Tk, i);
            seen += double(keys.hi - keys.lo);
          }
          EXPECT_DOUBLE_EQ(ops::visible_share(true, first_query, first_key, Tq, Tk), seen / double(Tq * Tk))
              << first_query << " " << first_key << " " << Tq << " " << Tk;
        }

  // 128 positions over a ring of 2 on a CPU (one rate for every size): the slowest rank's
  // attention against one process's 128 x 128 x 0.75 scores. In order (no zig-zag) rank 1 holds
  // positions 64-127 and computes both 64 x 64 blocks whole; in zig-zag places of 32 each rank
  // computes 5 blocks of 32 x 32 (rank 0: its runs' two diagonals and three whole ones).
  const sim::Hardware cpu = two_ranks(1);
  const double whole = engine::predict(small_gpt({}), 1, &cpu).time.attention;
  EXPECT_NEAR(engine::predict(small_gpt({"parallel.sequence=2", "parallel.sequence_zigzag=false"}), 2, &cpu)
                      .time.attention / whole,
              2.0 * 64 * 64 / (0.75 * 128 * 128), 1e-9);
  EXPECT_NEAR(engine::predict(small_gpt({"parallel.sequence=2", "parallel.sequence_zigzag=true"}), 2, &cpu)
                      .time.attention / whole,
              5.0 * 32 * 32 / (0.75 * 128 * 128), 1e-9);
  // On a GPU the visible pairs: rank 1's whole block and its diagonal's 64 x 65 / 2, against half
  // of 128 x 128.
  sim::Hardware gpu = cpu;
  gpu.device = Device::Kind::cuda;
  EXPECT_NEAR(engine::predict(small_gpt({"parallel.sequence=2", "parallel.sequence_zigzag=false"}), 2, &gpu)
                      .time.attention /
                  engine::predict(small_gpt({}), 1, &gpu).time.attention,
              (64.0 * 64 + 64.0 * 65 / 2) / (0.5 * 128 * 128), 1e-9);
}

}  // namespace
}  // namespace tidal
