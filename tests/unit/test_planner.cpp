// The planner (engine/planning/planner.h): a pipeline's micro-batches chosen where the config
// leaves them, activation checkpointing or more micro-batches where a layout does not fit as
// configured, the chunks' offload where nothing else fits, and the ranking (those that fit first, fastest first). Checked against the cost model's own
// predictions of the same configs.
#include "config/config.h"
#include "engine/planning/job.h"
#include "engine/planning/planner.h"
#include "models/factory.h"
#include "sim/cost_model.h"
#include "sim/hardware.h"

#include <gtest/gtest.h>

#include <fmt/format.h>
#include <omp.h>

#include <set>

namespace tidal {
namespace {

config::Config small_gpt(std::vector<std::string> more = {}) {
  std::vector<std::string> sets = {"model.n_layer=4", "model.n_embd=256", "model.n_head=4", "model.seq_len=128",
                                   "model.vocab_size=512", "train.batch_size=32", "train.precision=bf16",
                                   "train.device=cpu"};
  sets.insert(sets.end(), more.begin(), more.end());
  return config::load_config("", sets);
}

sim::Hardware h100() { return sim::load_hardware(std::string(TIDAL_HARDWARE_DIR) + "/h100-8x.toml"); }

const engine::PlannedLayout* find(const std::vector<engine::PlannedLayout>& planned, int data, int pipeline, int zero) {
  for (const engine::PlannedLayout& p : planned)
    if (p.cfg.parallel.data == data && p.cfg.parallel.pipeline == pipeline && p.cfg.parallel.tensor.size == 1 &&
        p.cfg.parallel.sequence == 1 && p.cfg.zero.stage == zero)
      return &p;
  return nullptr;
}

TEST(Planner, PipelineGetsTheFastestMicroBatches) {
  const sim::Hardware hw = h100();
  const config::Config cfg = small_gpt();
  const std::vector<engine::PlannedLayout> planned = engine::plan_layouts(cfg, 2, &hw);
  const engine::PlannedLayout* pipe = find(planned, 1, 2, 0);
  ASSERT_NE(pipe, nullptr);
  // More than one micro-batch, noted in the layout and its words.
  ASSERT_GT(pipe->cfg.train.micro_batch_size, 0);
  EXPECT_LT(pipe->cfg.train.micro_batch_size, 32);
  EXPECT_EQ(pipe->prediction.layout.at("train.micro_batch_size").get<std::int64_t>(), pipe->cfg.train.micro_batch_size);
  EXPECT_NE(sim::layout_words(pipe->prediction.layout).find("micro-batch"), std::string::npos);
  // Faster than the whole batch as one micro-batch (the bubble is half the step there), and
  // as fast as any of the counts it tried.
  config::Config one = pipe->cfg;
  one.train.micro_batch_size = 0;
  const double whole = engine::predict(one, 2, &hw).time.total();
  EXPECT_LT(pipe->prediction.time.total(), whole);
  for (std::int64_t micro : {16, 8, 4}) {
    config::Config c = pipe->cfg;
    c.train.micro_batch_size = micro;
    EXPECT_LE(pipe->prediction.time.total(), engine::predict(c, 2, &hw).time.total() * (1 + 1e-12)) << micro;
  }
  // A configured micro-batch is the user's: kept as set.
  const std::vector<engine::PlannedLayout> asked = engine::plan_layouts(small_gpt({"train.micro_batch_size=8"}), 2, &hw);
  const engine::PlannedLayout* kept = find(asked, 1, 2, 0);
  ASSERT_NE(kept, nullptr);
  EXPECT_EQ(kept->cfg.train.micro_batch_size, 8);
  EXPECT_FALSE(kept->prediction.layout.contains("train.micro_batch_size"));
}

TEST(Planner, LayoutThatDoesNotFitGetsRecomputationOrMoreMicroBatches) {
  const sim::Hardware hw = h100();
  // Data 2 as configured, and with every block recomputed: a device cap between their peaks.
  config::Config plain = small_gpt({"parallel.data=2"});
  const double needs = engine::predict(plain, 2, &hw).peak_bytes;
  config::Config blocks = plain;
  blocks.train.activation_checkpointing = config::Recompute::blocks;
  const double saved = engine::predict(blocks, 2, &hw).peak_bytes;
  ASSERT_LT(saved, needs);
  const std::uint64_t cap = std::uint64_t((saved + needs) / 2);
  const config::Config capped = small_gpt({fmt::format("memory.device_limit={}", cap)});
  config::Config check = capped;
  check.parallel.data = 2;
  ASSERT_FALSE(engine::predict(check, 2, &hw).fits);

  const std::vector<engine::PlannedLayout> planned = engine::plan_layouts(capped, 2, &hw);
  const engine::PlannedLayout* data2 = find(planned, 2, 1, 0);
  ASSERT_NE(data2, nullptr);
  EXPECT_TRUE(data2->prediction.fits) << data2->prediction.does_not_fit;
  EXPECT_LE(data2->prediction.peak_bytes, double(cap));
  const bool recomputes = data2->cfg.train.activation_checkpointing != config::Recompute::none;
  const bool accumulates = data2->cfg.train.micro_batch_size > 0;
  EXPECT_TRUE(recomputes || accumulates);
  EXPECT_EQ(data2->prediction.layout.contains("train.activation_checkpointing"), recomputes);
  EXPECT_EQ(data2->prediction.layout.contains("train.micro_batch_size"), accumulates);
  // Its prediction is the cost model's for the config it hands back.
  EXPECT_DOUBLE_EQ(data2->prediction.time.total(), engine::predict(data2->cfg, 2, &hw).time.total());
}

TEST(Planner, OffloadWhereNothingElseFitsAndTheFileTimesIt) {
  // 24 MiB of device: less than the model data alone (47 MiB), so only the chunks' moves fit it.
  sim::Hardware hw = h100();
  const config::Config capped = small_gpt({"memory.device_limit=24MiB"});
  std::vector<engine::PlannedLayout> planned = engine::plan_layouts(capped, 1, &hw);
  const engine::PlannedLayout* one = &planned.front();
  EXPECT_TRUE(one->prediction.fits) << one->prediction.does_not_fit;
  EXPECT_EQ(one->cfg.memory.offload, config::Offload::chunk);
  EXPECT_EQ(one->prediction.layout.at("memory.offload").get<std::string>(), "chunk");
  EXPECT_NE(sim::layout_words(one->prediction.layout).find("offload chunk"), std::string::npos);
  EXPECT_GT(one->prediction.time.offload, 0);
  EXPECT_TRUE(one->prediction.untimed.empty());
  EXPECT_DOUBLE_EQ(one->prediction.time.total(), engine::predict(one->cfg, 1, &hw).time.total());
  // Room for everything: no offload. A file without the host's AdamW rate: none offered.
  EXPECT_EQ(engine::plan_layouts(small_gpt(), 1, &hw).front().cfg.memory.offload, config::Offload::none);
  hw.host_optimizer_bandwidth = 0;
  planned = engine::plan_layouts(capped, 1, &hw);
  EXPECT_FALSE(planned.front().prediction.fits);
  EXPECT_EQ(planned.front().cfg.memory.offload, config::Offload::none);
}

TEST(Planner, RanksThoseThatFitFirstFastestFirst) {
  const sim::Hardware hw = h100();
  const std::vector<engine::PlannedLayout> planned = engine::plan_layouts(small_gpt({"memory.device_limit=40MiB"}), 4, &hw);
  ASSERT_GT(planned.size(), 4u);
  for (std::size_t k = 1; k < planned.size(); ++k) {
    const sim::Prediction &a = planned[k - 1].prediction, &b = planned[k].prediction;
    EXPECT_FALSE(!a.fits && b.fits) << k;
    if (a.fits && b.fits) {
      EXPECT_LE(a.time.total(), b.time.total()) << k;
    }
    if (!a.fits && !b.fits) {
      EXPECT_LE(a.needs_bytes, b.needs_bytes) << k;
    }
  }
  EXPECT_TRUE(planned.front().prediction.fits);
}

TEST(Planner, EveryLayoutOfEachModelKind) {
  // Each model kind plans (a ViT is not split by position: no sequence layouts), on several
  // threads; the same plan as on one, in the same order.
  const sim::Hardware hw = h100();
  for (const std::vector<std::string>& kind :
       {std::vector<std::string>{"model.type=vit", "data.kind=images", "model.image_size=64", "model.patch_size=16",
                                 "model.num_classes=16"},
        {"model.type=bert"}, {"model.type=llama", "model.n_kv_head=2"},
        {"model.type=qwen2", "model.n_kv_head=2"},
        {"model.type=mixtral", "model.n_kv_head=2", "model.experts=4", "model.intermediate_size=96"}}) {
    SCOPED_TRACE(kind.front());
    const config::Config cfg = small_gpt(kind);
    const std::vector<engine::PlannedLayout> planned = engine::plan_layouts(cfg, 4, &hw);
    ASSERT_GT(planned.size(), 4u);
    bool sequence = false;
    for (const engine::PlannedLayout& p : planned) sequence = sequence || p.cfg.parallel.sequence > 1;
    EXPECT_EQ(sequence, cfg.model.type != "vit");
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const std::vector<engine::PlannedLayout> alone = engine::plan_layouts(cfg, 4, &hw);
    omp_set_num_threads(threads);
    ASSERT_EQ(alone.size(), planned.size());
    for (std::size_t k = 0; k < planned.size(); ++k) {
      EXPECT_EQ(alone[k].prediction.layout, planned[k].prediction.layout) << k;
      EXPECT_EQ(alone[k].prediction.time.total(), planned[k].prediction.time.total()) << k;
    }
  }
}

TEST(Planner, LoraLayoutsKeepAFrozenBase) {
  // LoRA: the adapters split as their linears do under every tensor mode (1D and, at 4 ranks, 2D
  // are planned), and each rank's model data is the adapters' lists beside the frozen base in bf16
  // (2 B a parameter of the rank's block of the base).
  const sim::Hardware hw = h100();
  const config::Config lora = small_gpt({"finetune.method=lora", "finetune.lora_targets=c_attn,c_fc"});
  const std::vector<engine::PlannedLayout> planned = engine::plan_layouts(lora, 4, &hw);
  ASSERT_FALSE(planned.empty());
  std::set<parallel::TensorMode> modes;
  const engine::PlannedLayout* grid = nullptr;  // 2D over all 4 ranks
  for (const engine::PlannedLayout& p : planned) {
    if (p.cfg.parallel.tensor.size > 1) modes.insert(p.cfg.parallel.tensor.mode);
    if (p.cfg.parallel.tensor.size == 4 && p.cfg.parallel.tensor.mode == parallel::TensorMode::d2) grid = &p;
  }
  EXPECT_TRUE(modes.count(parallel::TensorMode::d1)) << "no 1D tensor layout planned";
  ASSERT_NE(grid, nullptr) << "no 2D tensor layout planned";
  // A's columns and B's rows halved on the 2 x 2 grid (features block j)
  EXPECT_EQ(grid->prediction.ranks.front().model_data.parameters, 4 * 8 * (128 + 384 + 128 + 512));
  const engine::PlannedLayout* data4 = find(planned, 4, 1, 0);
  ASSERT_NE(data4, nullptr);
  const sim::ModelDataBytes& md = data4->prediction.ranks.front().model_data;
  // rank 8 x (c_attn: A [8, 256], B [768, 8]; c_fc: A [8, 256], B [1024, 8]) x 4 layers
  EXPECT_EQ(md.parameters, 4 * 8 * (256 + 768 + 256 + 1024));
  const auto model = models::make_model(lora.model);
  EXPECT_EQ(md.frozen_bytes, 2 * model->num_parameters());
}

TEST(Planner, MixturesGetExpertParallelLayouts) {
  // parallel.expert where the data ranks split the experts (of 4: groups of 2 and 4), in every
  // ZeRO stage over the experts' own chunk lists (bf16); a dense model gets none.
  const sim::Hardware hw = h100();
  const config::Config moe =
      small_gpt({"model.type=mixtral", "model.n_kv_head=2", "model.experts=4", "model.intermediate_size=96"});
  const std::vector<engine::PlannedLayout> planned = engine::plan_layouts(moe, 4, &hw);
  std::set<std::pair<int, int>> expert_zero;  // (parallel.expert, zero.stage) of data 4
  const engine::PlannedLayout* whole = nullptr;  // data 4, every expert on every rank
  const engine::PlannedLayout* split = nullptr;  // data 4 (expert 4)
  for (const engine::PlannedLayout& p : planned) {
    if (p.cfg.parallel.data != 4) continue;
    expert_zero.insert({p.cfg.parallel.expert, p.cfg.zero.stage});
    if (p.cfg.zero.stage == 0 && p.cfg.parallel.expert == 1) whole = &p;
    if (p.cfg.zero.stage == 0 && p.cfg.parallel.expert == 4) split = &p;
  }
  for (int expert : {1, 2, 4})
    for (int zero = 0; zero <= 3; ++zero) EXPECT_TRUE(expert_zero.count({expert, zero})) << expert << " " << zero;
  ASSERT_NE(whole, nullptr);
  ASSERT_NE(split, nullptr);
  EXPECT_NE(sim::layout_words(split->prediction.layout).find("data 4 (expert 4)"), std::string::npos);
  // A rank holds a quarter of the experts: 14 B (bf16 weight, fp32 master copy and moments) for
  // each parameter of the other 3/4 less, within the whole model's list's padding.
  const std::int64_t expert_params = std::int64_t(moe.model.n_layer) * 4 * 3 * moe.model.n_embd * 96;
  const sim::ModelDataBytes& all = whole->prediction.ranks.front().model_data;
  EXPECT_EQ(all.parameters - split->prediction.ranks.front().model_data.parameters, expert_params * 3 / 4);
  const double saved = double(all.total() - split->prediction.ranks.front().model_data.total());
  const double padding = 14.0 * double(all.chunks_in_lists * all.chunk_elements - all.parameters);
  EXPECT_NEAR(saved, 14.0 * double(expert_params * 3 / 4), padding);
  for (const engine::PlannedLayout& p : engine::plan_layouts(small_gpt(), 4, &hw)) EXPECT_EQ(p.cfg.parallel.expert, 1);
}

TEST(Planner, OnlyLayoutsTheScheduleCanRun) {
  // Interleaved over 2 virtual stages: 4 and 8 pipeline stages would need 8 and 16 block layers
  // of the 4 there are, which the config refuses; the planner leaves those layouts out.
  const sim::Hardware hw = h100();
  const config::Config cfg = small_gpt({"parallel.schedule=interleaved", "parallel.pipeline=2",
                                        "parallel.virtual_stages=2", "train.micro_batch_size=4"});
  const std::vector<engine::PlannedLayout> planned = engine::plan_layouts(cfg, 8, &hw);
  ASSERT_GT(planned.size(), 4u);
  bool pipelined = false;
  for (const engine::PlannedLayout& p : planned) {
    EXPECT_LE(p.cfg.parallel.pipeline * p.cfg.parallel.virtual_stages, cfg.model.n_layer);
    pipelined = pipelined || p.cfg.parallel.pipeline == 2;
  }
  EXPECT_TRUE(pipelined);
}

}  // namespace
}  // namespace tidal
