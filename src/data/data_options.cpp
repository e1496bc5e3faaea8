#include "data/data_options.h"

#include "core/error.h"
#include "data/chat_dataset.h"
#include "data/images.h"
#include "data/indexed_dataset.h"
#include "data/markov.h"
#include "data/stream_dataset.h"
#include "data/text_bytes.h"
#include "data/token_shards.h"

#include <filesystem>

namespace tidal::data {
namespace {

// A source's tokens in place, by data.kind.
std::unique_ptr<TokenStream> open_stream(DataKind kind, const std::string& path, const std::string& key) {
  if (kind == DataKind::tokens) return std::make_unique<TokenShards>(path, key);
  if (kind == DataKind::indexed) return std::make_unique<IndexedDataset>(path, key);
  TIDAL_CHECK(std::filesystem::is_regular_file(path), "{} = '{}' does not exist or is not a file", key, path);
  return std::make_unique<TextBytes>(path);
}

// data.path (or data.eval_path) `spec`: one source, or a blend of them.
std::unique_ptr<TokenDataset> open_tokens(const DataOptions& o, const std::string& spec, const std::string& key,
                                          bool hold_out_eval) {
  const std::vector<std::pair<double, std::string>> parts = parse_blend(spec, key);
  std::vector<std::unique_ptr<StreamDataset>> sources;
  std::vector<double> weights;
  for (const auto& [weight, path] : parts) {
    sources.push_back(std::make_unique<StreamDataset>(open_stream(o.kind, path, key), hold_out_eval, o.seq_len,
                                                      o.vocab_size, o.objective, o.seed,
                                                      fmt::format("{} '{}'", key, path), o.packing));
    weights.push_back(weight);
  }
  if (sources.size() == 1) return std::move(sources.front());
  return std::make_unique<BlendedDataset>(std::move(sources), weights, o.seq_len, o.vocab_size, o.objective, o.seed,
                                          o.packing);
}

// Training from one dataset, evaluation from another (data.eval_path).
class SeparateEval final : public Dataset {
 public:
  SeparateEval(std::unique_ptr<Dataset> train, std::unique_ptr<Dataset> eval)
      : train_(std::move(train)), eval_(std::move(eval)) {}
  nn::Batch batch(std::int64_t first, std::int64_t count, Split split) const override {
    return (split == Split::train ? train_ : eval_)->batch(first, count, split);
  }
  std::string describe() const override {
    return fmt::format("{}\n  evaluated on {}", train_->describe(), eval_->describe());
  }
  std::vector<std::int64_t> sample_ids(std::int64_t first, std::int64_t count) const override {
    return train_->sample_ids(first, count);
  }
  nlohmann::json record(std::int64_t samples) const override { return train_->record(samples); }

 private:
  std::unique_ptr<Dataset> train_, eval_;
};

}  // namespace

std::unique_ptr<Dataset> make_dataset(const DataOptions& o) {
  const bool masked = o.objective == Objective::masked;
  if (o.kind == DataKind::markov) {
    // A masked language model reserves the last id as its mask token; the chain uses the others.
    const std::int64_t states = masked ? o.vocab_size - 1 : o.vocab_size;
    return std::make_unique<MarkovDataset>(states, o.markov_branching, o.seq_len, o.vocab_size, o.objective, o.seed);
  }
  if (o.kind == DataKind::images) {
    if (o.path.empty()) return std::make_unique<ImageDataset>(o.images, o.seed);
    return std::make_unique<ImageDataset>(o.path, o.images, o.seed);
  }
  if (o.kind == DataKind::chat) {
    auto chat = [&](const std::string& path, const std::string& key, bool hold_out_eval) {
      return std::make_unique<ChatDataset>(path, key, o.chat, hold_out_eval, o.seq_len, o.vocab_size, o.seed);
    };
    if (o.eval_path.empty()) return chat(o.path, "data.path", true);
    return std::make_unique<SeparateEval>(chat(o.path, "data.path", false), chat(o.eval_path, "data.eval_path", false));
  }
  TIDAL_CHECK(o.kind != DataKind::text || o.vocab_size >= 256 + (masked ? 1 : 0),
              "data.kind = \"text\" uses byte tokens 0..255: model.vocab_size must be at least {}", 256 + (masked ? 1 : 0));
  std::unique_ptr<Dataset> train = open_tokens(o, o.path, "data.path", o.eval_path.empty());
  if (o.eval_path.empty()) return train;
  return std::make_unique<SeparateEval>(std::move(train), open_tokens(o, o.eval_path, "data.eval_path", false));
}

nn::Batch shaped_batch(const DataOptions& o, std::int64_t count, Allocator& memory) {
  if (o.kind == DataKind::images) {  // data/images.cpp's batches
    const ImageShape& i = o.images;
    return {.images = Tensor::empty({count, i.channels, i.height, i.width}, DType::f32, memory),
            .targets = Tensor::empty({count}, DType::i32, memory)};
  }
  nn::Batch b{.tokens = Tensor::empty({count, o.seq_len}, DType::i32, memory),  // data/token_dataset.cpp's
              .targets = Tensor::empty({count, o.seq_len}, DType::i32, memory)};
  if (o.packing.documents) b.positions = Tensor::empty({count, o.seq_len}, DType::i32, memory);
  return b;
}

}  // namespace tidal::data
