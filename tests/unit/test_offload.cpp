// Heterogeneous memory (src/memory/dynamic_memory.h, memory_tracer.h): the tracer's moments and
// next uses, and a GPT trained with its chunks moving between a capped device tier and the host
// - at 25% of its model data, activations counted in the same tier - against the same GPT on
// chunks that never move: per-step losses and final weights bitwise equal, the device tier's peak
// within the cap, evictions in every iteration. Belady moves no more bytes than LRU; the static
// partition (every param chunk pinned on the device) moves the gradients down and the parameters
// up each step, and stops with an error naming the device tier when they do not fit. Two chunk
// managers joined to one dynamic memory (a mixture's experts' lists beside the rest) train
// bitwise like one under the cap.
#include "memory/chunk_manager.h"
#include "models/factory.h"
#include "support/chunk_training.h"

#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <memory>
#include <span>

namespace tidal::memory {
namespace {

TEST(MemoryTracer, NonModelBytesAndNextUses) {
  MemoryTracer t;
  // Three moments: chunk 0 at 0 and 2, chunk 1 at 1.
  t.record_moment("a");
  t.record_use(0);
  t.record_use(0);
  t.close_interval(100, 60);
  t.record_moment("b");
  t.record_use(1);
  t.close_interval(150, 60);
  t.record_moment("c");
  t.record_use(0);
  t.close_interval(90, 80);
  t.finish();
  EXPECT_EQ(t.moments(), 3);
  EXPECT_EQ(t.non_model(0), 40);
  EXPECT_EQ(t.non_model(1), 90);
  EXPECT_EQ(t.non_model(2), 10);
  EXPECT_EQ(t.non_model(7), 90);  // outside the trace: the peak
  EXPECT_EQ(t.next_use(0, 0), 2);
  EXPECT_EQ(t.next_use(0, 2), 3);  // the next iteration's moment 0
  EXPECT_EQ(t.next_use(1, 1), 4);  // the next iteration's moment 1
  EXPECT_EQ(t.next_use(1, -1), 1);
  EXPECT_EQ(t.next_use(5, 0), MemoryTracer::kNever);
  EXPECT_EQ(t.json()["moments"][1]["operator"], "b");
}

constexpr std::int64_t kChunk = 20000;  // 13 chunks: a block's weights span several

struct Trained {
  std::vector<float> losses;
  std::vector<float> weights;  // every parameter's master copy, concatenated
  std::int64_t model_data = 0, device_peak = 0;
  MoveStats moves;                    // all steps
  std::vector<std::int64_t> moved;    // bytes moved per step (both ways)
  std::vector<std::int64_t> evictions;  // per step
  std::array<int, 2> param_chunks_on_host = {0, 0};  // after the last step, per chunk manager
};

// `cap` = 0: plain chunks, no tiers. `split`: each block's MLP parameters in a second chunk
// manager, which joins the first one's dynamic memory of the device tier (as a mixture's experts
// do under expert parallelism).
Trained train(std::optional<OffloadOptions> offload, double cap_fraction, DType dtype = DType::f32, int steps = 4,
              bool split = false) {
  Trained out;
  auto model = models::make_model(testing::chunk_test_gpt());
  model->materialize(11);
  // The cap is a fraction of the model data: 4 (param) + 12 (optimizer) bytes per element of
  // chunk space, in fp32.
  HostAllocator host;
  Allocator& device = device_allocator();
  device.set_capacity(std::numeric_limits<std::size_t>::max());
  std::optional<ScopedDefaultAllocator> scope;
  if (offload) scope.emplace(device);
  std::optional<DynamicMemory> tier;
  if (offload) tier.emplace(*offload, device, host);
  std::vector<nn::Parameter*> first, second;
  for (nn::Parameter* p : model->parameters())
    (split && p->name.find(".mlp.") != std::string::npos ? second : first).push_back(p);
  const ChunkOptions options{
      .chunk_elements = kChunk, .compute_dtype = dtype, .offload = offload, .tier = tier ? &*tier : nullptr};
  std::vector<std::unique_ptr<ChunkManager>> keepers;
  for (const std::vector<nn::Parameter*>* params : {&first, &second})
    if (!params->empty()) keepers.push_back(std::make_unique<ChunkManager>(*model, *params, options, device, host));
  std::vector<ChunkManager*> all;
  for (const auto& k : keepers) {
    all.push_back(k.get());
    out.model_data += k->model_data_bytes();
  }
  if (offload) {
    device.set_capacity(std::size_t(cap_fraction * double(out.model_data)));
    device.reset_peak();
  }
  MoveStats before;
  testing::train_on_chunks(*model, std::span<ChunkManager* const>(all), steps, default_allocator(), [&](float loss) {
    out.losses.push_back(loss);
    if (tier) {
      const MoveStats& now = tier->stats();
      out.moved.push_back(now.bytes_to_device + now.bytes_to_host - before.bytes_to_device - before.bytes_to_host);
      out.evictions.push_back(now.evictions - before.evictions);
      before = now;
    }
  });
  for (const nn::Parameter* p : model->parameters())
    for (const ChunkManager* k : all)
      if (k->manages(*p)) {
        const Tensor master = k->slot(ChunkKind::master, *p);
        out.weights.insert(out.weights.end(), master.data<float>(), master.data<float>() + master.numel());
      }
  if (tier) {
    out.moves = tier->stats();
    out.device_peak = tier->device_peak_bytes();
    for (int k = 0; k < int(all.size()); ++k)
      for (int c = 0; c < all[std::size_t(k)]->layout().chunks; ++c)
        out.param_chunks_on_host[std::size_t(k)] += tier->where(k, ChunkKind::param, c) == MemoryTier::host;
  }
  keepers.clear();  // before the tier they joined
  return out;
}

struct RestoreDevice {
  ~RestoreDevice() { device_allocator().set_capacity(std::numeric_limits<std::size_t>::max()); }
};

TEST(Offload, CappedAtAQuarterOfModelDataTrainsBitwiseLikeUncapped) {
  RestoreDevice restore;
  const Trained plain = train(std::nullopt, 0);
  for (Eviction e : {Eviction::belady, Eviction::lru}) {
    SCOPED_TRACE(e == Eviction::belady ? "belady" : "lru");
    const Trained capped = train(OffloadOptions{.eviction = e}, 0.25);
    ASSERT_EQ(capped.losses.size(), plain.losses.size());
    EXPECT_EQ(std::memcmp(capped.losses.data(), plain.losses.data(), plain.losses.size() * sizeof(float)), 0);
    ASSERT_EQ(capped.weights.size(), plain.weights.size());
    EXPECT_EQ(std::memcmp(capped.weights.data(), plain.weights.data(), plain.weights.size() * sizeof(float)), 0);
    EXPECT_LE(double(capped.device_peak), 0.25 * double(capped.model_data));
    EXPECT_GT(double(capped.device_peak), 0.2 * double(capped.model_data));  // the cap is what binds
    for (std::size_t s = 0; s < capped.evictions.size(); ++s) EXPECT_GT(capped.evictions[s], 0) << "step " << s + 1;
  }
}

TEST(Offload, TwoChunkManagersShareTheDeviceTierAndTrainBitwiseLikeOne) {
  // The MLPs' parameters in lists of their own, joined to the same dynamic memory: under a quarter
  // of the model data, chunks of both lists are evicted, and the run equals one manager's bitwise.
  RestoreDevice restore;
  const Trained plain = train(std::nullopt, 0);
  const Trained split = train(OffloadOptions{}, 0.25, DType::f32, 4, true);
  ASSERT_EQ(split.losses.size(), plain.losses.size());
  EXPECT_EQ(std::memcmp(split.losses.data(), plain.losses.data(), plain.losses.size() * sizeof(float)), 0);
  ASSERT_EQ(split.weights.size(), plain.weights.size());
  EXPECT_EQ(std::memcmp(split.weights.data(), plain.weights.data(), plain.weights.size() * sizeof(float)), 0);
  EXPECT_LE(double(split.device_peak), 0.25 * double(split.model_data));
  for (std::size_t s = 0; s < split.evictions.size(); ++s) EXPECT_GT(split.evictions[s], 0) << "step " << s + 1;
  EXPECT_GT(split.param_chunks_on_host[0], 0);
  EXPECT_GT(split.param_chunks_on_host[1], 0);
}

TEST(Offload, BeladyMovesNoMoreThanLruAfterTheWarmUp) {
  RestoreDevice restore;
  for (double cap : {0.25, 0.3}) {
    const Trained belady = train(OffloadOptions{.eviction = Eviction::belady}, cap);
    const Trained lru = train(OffloadOptions{.eviction = Eviction::lru}, cap);
    std::int64_t b = 0, l = 0;
    for (std::size_t s = 1; s < belady.moved.size(); ++s) b += belady.moved[s], l += lru.moved[s];
    EXPECT_LE(b, l) << "cap " << cap;
    EXPECT_GT(b, 0) << "cap " << cap;
  }
}

TEST(Offload, OptimizerStatesFillTheMarginAndStayThere) {
  RestoreDevice restore;
  // A roomy device: after the warm-up every param chunk and some optimizer states fit, so the
  // steps after it move less than the warm-up's, and the param chunks whose states are on the
  // device never leave.
  const Trained plain = train(std::nullopt, 0);
  const Trained roomy = train(OffloadOptions{}, 0.6);
  EXPECT_EQ(std::memcmp(roomy.losses.data(), plain.losses.data(), plain.losses.size() * sizeof(float)), 0);
  EXPECT_LT(roomy.moved.back(), roomy.moved.front());
  EXPECT_EQ(roomy.evictions.back(), 0);
}

TEST(Offload, StaticPartitionMovesGradientsAndParametersEachStep) {
  RestoreDevice restore;
  const Trained plain = train(std::nullopt, 0);
  const Trained fixed = train(OffloadOptions{.partition = Partition::fixed}, 0.6);
  EXPECT_EQ(std::memcmp(fixed.losses.data(), plain.losses.data(), plain.losses.size() * sizeof(float)), 0);
  // Each step: the param list down (gradients) and back up (parameters), in fp32.
  const std::int64_t param_list = fixed.model_data / 4;
  for (std::size_t s = 0; s < fixed.moved.size(); ++s) EXPECT_EQ(fixed.moved[s], 2 * param_list) << "step " << s + 1;
  EXPECT_EQ(fixed.moves.evictions, 0);
  // At a quarter of the model data the param list (a quarter) and the activations do not fit.
  try {
    train(OffloadOptions{.partition = Partition::fixed}, 0.25);
    FAIL() << "the static partition should not fit";
  } catch (const OutOfMemory& e) {
    EXPECT_NE(std::string(e.what()).find("device"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tidal::memory
