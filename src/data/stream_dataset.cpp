#include "data/stream_dataset.h"

#include "core/error.h"
#include "data/sample_order.h"

namespace tidal::data {

StreamDataset::StreamDataset(std::unique_ptr<TokenStream> stream, bool hold_out_eval, std::int64_t seq_len,
                             std::int64_t vocab, Objective objective, std::uint64_t seed, std::string source,
                             Packing packing)
    : TokenDataset(seq_len, vocab, objective, seed, packing),
      stream_(std::move(stream)),
      source_(std::move(source)),
      held_out_(hold_out_eval) {
  TIDAL_CHECK(!packing.documents || packing.eod_id >= 0 || stream_->document_starts(0, 0).has_value(),
              "{} records no documents: set data.eod_id to the end-of-text id that ends each (GPT-2: 50256), or "
              "leave data.cross_document_attention at true",
              source_);
  const std::int64_t windows = stream_->tokens() / (seq_len + 1);
  TIDAL_CHECK(windows >= (hold_out_eval ? 2 : 1), "{} holds {} tokens: fewer than {} sequences of model.seq_len + 1 = {}",
              source_, stream_->tokens(), hold_out_eval ? "two" : "one", seq_len + 1);
  if (hold_out_eval) {
    eval_windows_ = std::max<std::int64_t>(1, windows / 20);
    train_windows_ = windows - eval_windows_;
    eval_first_ = train_windows_;
  } else {
    train_windows_ = eval_windows_ = windows;
  }
}

std::int64_t StreamDataset::window(std::int64_t index, Split split) const {
  return split == Split::train ? training_sample(index, train_windows_, seed_) : eval_first_ + index % eval_windows_;
}

std::vector<std::int64_t> StreamDataset::sample_ids(std::int64_t first, std::int64_t count) const {
  std::vector<std::int64_t> out;
  for (std::int64_t i = first; i < first + count; ++i) out.push_back(window(i, Split::train));
  return out;
}

TokenSample StreamDataset::sample(std::int64_t index, Split split) const {
  TokenSample s;
  s.tokens.resize(std::size_t(seq_len_ + 1));
  std::vector<std::int32_t>& out = s.tokens;
  const std::int64_t first = window(index, split) * (seq_len_ + 1);
  stream_->read(first, seq_len_ + 1, out.data());
  for (std::size_t i = 0; i < out.size(); ++i)
    TIDAL_CHECK(out[i] >= 0 && out[i] < vocab_,
                "{}: token {} at position {} is not below model.vocab_size ({}): the tokenizer that wrote it has a "
                "larger vocabulary than the model (tokenize with the model's tokenizer, or raise model.vocab_size)",
                source_, out[i], first + std::int64_t(i), vocab_);
  if (!packing_.documents) return s;
  if (auto starts = stream_->document_starts(first, seq_len_ + 1)) {
    s.document_starts = std::move(*starts);
  } else {
    for (std::int64_t t = 0; t < seq_len_; ++t)  // the end-of-text id ends its document
      if (out[std::size_t(t)] == packing_.eod_id) s.document_starts.push_back(t + 1);
  }
  return s;
}

std::string StreamDataset::describe() const {
  if (!held_out_) return fmt::format("{}; {} sequences of {}", stream_->describe(), train_windows_, seq_len_ + 1);
  return fmt::format("{}; {} training and {} eval sequences of {}", stream_->describe(), train_windows_, eval_windows_,
                     seq_len_ + 1);
}

BlendedDataset::BlendedDataset(std::vector<std::unique_ptr<StreamDataset>> sources, std::vector<double> weights,
                               std::int64_t seq_len, std::int64_t vocab, Objective objective, std::uint64_t seed,
                               Packing packing)
    : TokenDataset(seq_len, vocab, objective, seed, packing),
      sources_(std::move(sources)),
      train_(weights),
      eval_(weights) {}

TokenSample BlendedDataset::sample(std::int64_t index, Split split) const {
  const auto [source, own] = (split == Split::train ? train_ : eval_).at(index);
  return sources_[std::size_t(source)]->sample(own, split);
}

std::string BlendedDataset::describe() const {
  std::string out = fmt::format("a blend of {} sources:", sources_.size());
  for (std::size_t k = 0; k < sources_.size(); ++k)
    out += fmt::format("\n  {:.3f}  {}", train_.weights()[k], sources_[k]->describe());
  return out;
}

std::vector<std::int64_t> BlendedDataset::sample_ids(std::int64_t first, std::int64_t count) const {
  std::vector<std::int64_t> out;
  for (std::int64_t i = first; i < first + count; ++i) {
    const auto [source, own] = train_.at(i);
    out.push_back((std::int64_t(source) << 40) + sources_[std::size_t(source)]->window(own, Split::train));
  }
  return out;
}

nlohmann::json BlendedDataset::record(std::int64_t samples) const {
  return {{"samples_per_source", train_.drawn(samples)}};
}

}  // namespace tidal::data
