// Meta tensors (core/device.h) and the meta backend (ops/meta/recorder.h), which the planner runs
// the real modules on: a GPT's and a Llama's forward and backward on meta memory allocates, keeps
// and lets go exactly what the same step computing on the CPU does (the activation pool's peak and
// what its forward leaves for backward, byte for byte: fp32 and bf16, plain, checkpointed,
// selective and with loss blocks), the recorder hears every GEMM (the model's closed-form FLOPs),
// and a planned group completes a meta tensor's collective, counted, while it still refuses real
// data. ctest runs it again without oneDNN (unit.meta_tensors_widened), where bf16 operands are
// widened to fp32 copies.
#include "comm/counting_communicator.h"
#include "comm/planning_communicator.h"
#include "models/factory.h"
#include "nn/runner.h"
#include "ops/cast.h"
#include "ops/cpu/onednn_matmul.h"
#include "ops/meta/recorder.h"
#include "support/random.h"

#include <gtest/gtest.h>

#include <memory>

namespace tidal {
namespace {

constexpr int kLayers = 2, kHeads = 2;
constexpr std::int64_t kWidth = 32, kVocab = 48, kTokens = 16, kSamples = 3;

// Sums the products' FLOPs (2 m n k each).
class FlopCounter final : public ops::meta::Recorder {
 public:
  FlopCounter() : Recorder({.cpu = true, .bf16_native = ops::cpu::onednn_bf16_native()}) {}
  void gemm(DType, std::int64_t m, std::int64_t n, std::int64_t k, std::int64_t batch) override {
    gemm_flops += 2.0 * double(m) * double(n) * double(k) * double(batch);
  }
  void attention(DType, double flops, std::int64_t) override { attention_flops += flops; }
  double gemm_flops = 0, attention_flops = 0;
};

struct Step {
  std::size_t peak = 0, kept = 0;  // the pool's peak over the step; what forward left for backward
  double gemm_flops = 0;
};

// One forward and backward of a small model of `type` whose parameters (and gradients) are in
// `dtype`, its tensors on meta memory or computed on the CPU.
Step step(bool meta, DType dtype, const nn::CheckpointPolicy& policy, const std::string& type = "gpt") {
  models::ModelConfig m;
  m.type = type;
  m.n_layer = kLayers;
  m.n_head = kHeads;
  m.n_embd = kWidth;
  m.vocab_size = kVocab;
  m.seq_len = kTokens;
  auto model = models::make_model(m, policy);
  if (!meta) model->materialize(3);
  for (nn::Parameter* p : model->parameters()) {
    Allocator& memory = meta ? meta_allocator() : host_allocator();
    Tensor data = Tensor::empty(p->shape, dtype, memory);
    if (!meta) ops::cast(data, p->data);
    p->data = data;
    p->grad = Tensor::zeros(p->shape, dtype, memory);
  }
  Allocator& inputs = meta ? meta_allocator() : host_allocator();
  nn::Batch batch{.tokens = Tensor::empty({kSamples, kTokens}, DType::i32, inputs),
                  .targets = Tensor::empty({kSamples, kTokens}, DType::i32, inputs)};
  if (!meta) {
    batch.tokens.copy_from(testing::randint({kSamples, kTokens}, 1, 0, kVocab));
    batch.targets.copy_from(testing::randint({kSamples, kTokens}, 2, 0, kVocab));
  }
  std::unique_ptr<Allocator> pool = meta ? std::unique_ptr<Allocator>(std::make_unique<MetaAllocator>())
                                         : std::unique_ptr<Allocator>(std::make_unique<HostAllocator>());
  FlopCounter flops;
  Step out;
  {
    const ScopedDefaultAllocator temporaries(*pool);
    const ops::meta::ScopedRecorder recording(flops);
    nn::Runner runner;
    const nn::StepState state{.runner = &runner, .seed = 9, .batch = &batch, .activations = pool.get()};
    nn::Context ctx(state);
    model->run_forward(ctx);
    out.kept = pool->current_bytes();
    model->run_backward(ctx);
  }
  out.peak = pool->peak_bytes();
  out.gemm_flops = flops.gemm_flops;
  EXPECT_EQ(pool->current_bytes(), 0u);
  return out;
}

void expect_meta_allocates_as_the_cpu(DType dtype, const nn::CheckpointPolicy& policy,
                                      const std::string& type = "gpt") {
  const Step cpu = step(false, dtype, policy, type), meta = step(true, dtype, policy, type);
  EXPECT_EQ(meta.peak, cpu.peak);
  EXPECT_EQ(meta.kept, cpu.kept);
  EXPECT_EQ(cpu.gemm_flops, 0.0);  // the recorder hears meta tensors' products only
}

TEST(MetaTensors, ModelStepAllocatesAsTheCpusInFp32) { expect_meta_allocates_as_the_cpu(DType::f32, {}); }

TEST(MetaTensors, ModelStepAllocatesAsTheCpusInBf16) { expect_meta_allocates_as_the_cpu(DType::bf16, {}); }

TEST(MetaTensors, CheckpointedSelectiveAndLossBlocksAllocateAsTheCpus) {
  expect_meta_allocates_as_the_cpu(DType::f32, {.every = 1});
  expect_meta_allocates_as_the_cpu(DType::bf16, {.selective = true});
  expect_meta_allocates_as_the_cpu(DType::f32, {.loss_chunks = 4});
}

TEST(MetaTensors, LlamaStepAllocatesAsTheCpus) {  // rotary tables, RMSNorm, SwiGLU, an untied head
  expect_meta_allocates_as_the_cpu(DType::f32, {}, "llama");
  expect_meta_allocates_as_the_cpu(DType::bf16, {.every = 1}, "llama");
}

TEST(MetaTensors, RecorderHearsEveryProduct) {
  // Each block's linears (qkv, projection, the MLP's two: 12 C^2 per row) and the tied head (C V),
  // forward; backward's input and weight gradients twice that.
  const double rows = double(kSamples * kTokens), C = double(kWidth);
  const double forward = 2 * rows * (kLayers * 12 * C * C + C * double(kVocab));
  EXPECT_DOUBLE_EQ(step(true, DType::f32, {}).gemm_flops, 3 * forward);
}

TEST(MetaTensors, HaveAddressesOfTheirOwnAndNoValues) {
  MetaAllocator memory;
  const Tensor a = Tensor::empty({4, 8}, DType::f32, memory), b = Tensor::empty({4, 8}, DType::f32, memory);
  EXPECT_TRUE(a.device().is_meta());
  EXPECT_FALSE(has_values(a));
  EXPECT_NE(a.raw(), b.raw());
  EXPECT_EQ(memory.current_bytes(), 2 * 4 * 8 * sizeof(float));
  Tensor c = a.clone(memory);  // copies, fills and reads touch nothing
  c.fill_(1.0f);
  c.zero_();
  EXPECT_EQ(Tensor::empty({1}, DType::f32, memory).item(), 0.0f);
}

TEST(MetaTensors, PlannedGroupCompletesAMetaCollectiveAndRefusesRealData) {
  comm::CountingCommunicator group(std::make_shared<comm::PlanningCommunicator>("tensor", std::vector<int>{0, 1}, 0));
  Tensor meta = Tensor::empty({6}, DType::f32, meta_allocator());
  EXPECT_TRUE(group.all_reduce(meta)->is_completed());
  Tensor gathered = Tensor::empty({12}, DType::f32, meta_allocator());
  EXPECT_TRUE(group.all_gather(gathered, meta)->is_completed());
  EXPECT_EQ(group.stats().at("all_reduce").elements, 6);
  EXPECT_EQ(group.stats().at("all_gather").calls, 1);
  Tensor host = Tensor::zeros({6});
  EXPECT_THROW(group.all_reduce(host), InternalError);
}

}  // namespace
}  // namespace tidal
