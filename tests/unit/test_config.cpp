// Config: defaults, files, overrides and their precedence, to_toml round trip, sizes.
#include "config/config.h"
#include "config/hf_model.h"
#include "config/schema.h"
#include "core/error.h"
#include "models/llama/family.h"
#include "models/registry.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace tidal {
namespace {

std::string write_temp(const std::string& name, const std::string& text) {
  const auto p = std::filesystem::temp_directory_path() / (name + "-" + std::to_string(::getpid()) + ".toml");
  std::ofstream(p) << text;
  return p.string();
}

TEST(Config, FileThenOverridesThenRoundTrip) {
  const std::string path = write_temp("cfg", "[model]\nn_layer = 3\nn_embd = 96\nn_head = 4\n[train]\nlr = 1e-3\n"
                                             "[parallel.tensor]\nmode = \"1d\"\n");
  const config::Config c = config::load_config(
      path, {"train.lr=5e-4", "model.type=bert", "checkpoint.dir=\"a b\"", "parallel.scatter_gather=false"});
  EXPECT_FALSE(c.parallel.scatter_gather);  // a boolean key, and it survives the round trip below
  EXPECT_EQ(c.model.n_layer, 3);
  EXPECT_EQ(c.model.n_embd, 96);
  EXPECT_EQ(c.model.type, "bert");
  EXPECT_DOUBLE_EQ(c.train.lr, 5e-4);  // --set wins over the file
  EXPECT_EQ(c.checkpoint.dir, "a b");
  EXPECT_EQ(c.train.steps, config::TrainConfig{}.steps);  // untouched keys keep defaults
  const std::string again = write_temp("cfg2", config::to_toml(c));
  EXPECT_EQ(config::to_toml(config::load_config(again, {})), config::to_toml(c));
  std::filesystem::remove(path);
  std::filesystem::remove(again);
}

// train.precision left unset follows the device: fp32 on the CPU, bf16 on a GPU; set, it is kept.
TEST(Config, PrecisionFollowsTheDeviceUnlessSet) {
  EXPECT_EQ(config::load_config("", {}).train.precision, DType::f32);
  EXPECT_EQ(config::load_config("", {"train.device=cuda"}).train.precision, DType::bf16);
  EXPECT_EQ(config::load_config("", {"train.device=cuda", "train.precision=fp32"}).train.precision, DType::f32);
  const std::string path = write_temp("cfg-precision", "[train]\ndevice = \"cuda\"\nprecision = \"fp16\"\n");
  EXPECT_EQ(config::load_config(path, {}).train.precision, DType::f16);
  std::filesystem::remove(path);
}

// fp8 is bf16 storage with the linear layers' products in fp8, and is written back as fp8; any
// other precision turns it off again.
TEST(Config, Fp8IsBf16WithFp8Products) {
  const config::Config c = config::load_config("", {"train.device=cuda", "train.precision=fp8"});
  EXPECT_EQ(c.train.precision, DType::bf16);
  EXPECT_TRUE(c.train.fp8);
  EXPECT_NE(config::to_toml(c).find("precision = \"fp8\""), std::string::npos) << config::to_toml(c);
  const std::string path = write_temp("cfg-fp8", config::to_toml(c));
  EXPECT_TRUE(config::load_config(path, {}).train.fp8) << "round trip";
  EXPECT_FALSE(config::load_config(path, {"train.precision=fp16"}).train.fp8);
  std::filesystem::remove(path);
}

// The message of the error that loading the defaults with `sets` gives ("no error" if none).
std::string message(const std::vector<std::string>& sets) {
  try {
    config::load_config("", sets);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

TEST(Config, ErrorsNameTheKey) {
  EXPECT_NE(message({"train.stepz=3"}).find("train.stepz"), std::string::npos);
  EXPECT_NE(message({"model.n_head=5"}).find("model.n_head (5)"), std::string::npos);
  EXPECT_NE(message({"train.micro_batch_size=5"}).find("train.micro_batch_size"), std::string::npos);
  EXPECT_NE(message({"parallel.tensor.mode=4d"}).find("parallel.tensor.mode"), std::string::npos);
  EXPECT_NE(message({"train.steps=-1"}).find("train.steps"), std::string::npos);
  EXPECT_NE(message({"model.type=vit"}).find("data.kind"), std::string::npos);
  EXPECT_NE(message({"train.activation_checkpointing=some"}).find("train.activation_checkpointing"), std::string::npos);
  EXPECT_NE(message({"train.activation_offload=host"}).find("train.activation_checkpointing"), std::string::npos);
  EXPECT_NE(message({"train.activation_checkpointing=every_k", "train.activation_checkpointing_k=0"})
                .find("train.activation_checkpointing_k"),
            std::string::npos);
  EXPECT_NE(message({"parallel.timeout_s=0"}).find("parallel.timeout_s"), std::string::npos);
  EXPECT_NE(message({"parallel.bucket_mb=0"}).find("parallel.bucket_mb"), std::string::npos);
  EXPECT_NE(message({"parallel.scatter_gather=1"}).find("parallel.scatter_gather must be true or false, got the "
                                                         "integer 1"),
            std::string::npos);
}

TEST(Config, LlamaKeys) {
  const config::Config c = config::load_config("", {"model.type=llama", "model.n_head=4", "model.n_kv_head=2",
                                                    "model.n_embd=64"});
  EXPECT_FALSE(models::llama_keys(c.model).tie_embeddings);  // Llama's head is its own unless told otherwise
  EXPECT_TRUE(models::llama_keys(config::load_config("", {"model.type=llama", "model.tie_embeddings=true"}).model)
                  .tie_embeddings);
  EXPECT_EQ(models::llama_intermediate_size(c.model), 256);  // 2/3 of 4 x 64 = 170, rounded up to 256s
  EXPECT_DOUBLE_EQ(models::norm_eps(c.model), 1e-6);
  EXPECT_NE(message({"model.type=llama", "model.n_head=4", "model.n_kv_head=3", "model.n_embd=64"})
                .find("model.n_kv_head (3) must divide model.n_head (4)"),
            std::string::npos);
  EXPECT_NE(message({"model.type=llama", "model.n_head=4", "model.n_embd=36"}).find("must be even"), std::string::npos);
  EXPECT_NE(message({"model.type=llama", "model.rope_theta=0.5"}).find("model.rope_theta"), std::string::npos);
}

TEST(Config, AnotherFamilysKeysAreErrors) {  // models::Family::keys: they would be ignored
  EXPECT_NE(message({"model.n_kv_head=1"}).find("--set model.n_kv_head=1: model.n_kv_head is read by model.type = "
                                                "llama or qwen2 or mixtral or qwen2_moe only, and model.type = \"gpt\" "
                                                "would ignore it"),
            std::string::npos);
  EXPECT_NE(message({"model.type=llama", "model.experts=4"}).find("model.type = mixtral or qwen2_moe only"),
            std::string::npos);
  EXPECT_NE(message({"model.type=mixtral", "model.shared_expert_intermediate_size=64"}).find("qwen2_moe only"),
            std::string::npos);
  EXPECT_NE(message({"model.type=llama", "model.type_vocab_size=3"}).find("model.type = bert only"), std::string::npos);
  EXPECT_NE(message({"model.type=bert", "model.patch_size=4"}).find("model.type = vit only"), std::string::npos);
  // Every family's keys, and the family's own, are its to read; another's at its default changes
  // nothing (a whole config written out holds every key).
  EXPECT_NO_THROW(config::load_config("", {"model.type=llama", "model.n_kv_head=1", "model.dropout=0.1"}));
  EXPECT_NO_THROW(config::load_config("", {"model.type=bert", "model.type_vocab_size=3", "model.activation=gelu_erf"}));
  EXPECT_NO_THROW(config::load_config("", {"model.rope_theta=10000"}));
}

// A program's family declares keys of its own as the built-in ones do: [model] takes them, checked
// by their declared type, another family's config may not set them, and a stored config keeps them.
struct WidgetKeys {
  std::int64_t widgets = 3;
  double spin = 0.5;
};

const models::KeyTable<WidgetKeys>& widget_keys() {
  static const models::KeyTable<WidgetKeys> table = models::KeyTable<WidgetKeys>()
                                                        .add("widgets", &WidgetKeys::widgets, "widgets a block", 1)
                                                        .add("spin", &WidgetKeys::spin, "their spin");
  return table;
}

TEST(Config, AProgramsFamilyHasKeysOfItsOwn) {
  static const bool registered = [] {
    models::register_family({.name = "widget_gpt", .title = "", .keys = widget_keys().keys(), .build = models::find_family("gpt").build});
    return true;
  }();
  ASSERT_TRUE(registered);
  EXPECT_THROW(models::register_family({.name = "widget_gpt_2", .title = "",
                                        .keys = {{.name = "n_layer", .fallback = std::int64_t{2}, .help = ""}},
                                        .build = models::find_family("gpt").build}),
               Error);  // a key every family has
  const config::Config c = config::load_config("", {"model.type=widget_gpt", "model.widgets=5"});
  const WidgetKeys k = widget_keys().read(c.model.family_keys);
  EXPECT_EQ(k.widgets, 5);
  EXPECT_DOUBLE_EQ(k.spin, 0.5);
  const config::Config again = config::load_config_text(config::to_toml(c), "stored");
  EXPECT_EQ(widget_keys().read(again.model.family_keys).widgets, 5);
  EXPECT_NE(config::find_key("model.widgets")->help.find("widget_gpt: widgets a block"), std::string::npos);
  EXPECT_NE(message({"model.type=widget_gpt", "model.widgets=0"}).find("model.widgets must not be below 1, got 0"),
            std::string::npos);
  EXPECT_NE(message({"model.type=widget_gpt", "model.spin=fast"}).find("model.spin must be a number"),
            std::string::npos);
  EXPECT_NE(message({"model.widgets=4"}).find("model.widgets is read by model.type = widget_gpt only"),
            std::string::npos);
  // A built-in family's keys survive a stored config the same way.
  const config::Config llama = config::load_config("", {"model.type=llama", "model.n_kv_head=1", "model.rope_theta=5e5"});
  const models::LlamaKeys stored = models::llama_keys(config::load_config_text(config::to_toml(llama), "stored").model);
  EXPECT_EQ(stored.n_kv_head, 1);
  EXPECT_DOUBLE_EQ(stored.rope_theta, 5e5);
  EXPECT_FALSE(stored.tie_embeddings);
}

TEST(Config, Sizes) {
  EXPECT_EQ(config::parse_bytes("512MiB", "k"), 512ull << 20);
  EXPECT_EQ(config::parse_bytes("2 GB", "k"), 2000000000ull);
  EXPECT_EQ(config::parse_bytes("1.5KiB", "k"), 1536ull);
  EXPECT_THROW(config::parse_bytes("12 parsecs", "k"), Error);
}

}  // namespace
}  // namespace tidal
