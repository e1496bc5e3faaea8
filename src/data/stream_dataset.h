// Samples as windows of seq_len + 1 tokens over a token stream (data/token_stream.h), read in
// place: the training split is its windows in a seeded order per epoch (data/sample_order.h) and
// the eval split its last 1/20 (at least one), held out - or, for a dataset with an eval source of
// its own (data.eval_path), every window is for training, and the eval source's windows are read
// in order. A blend (data/blend.h) draws its samples from sources of either kind by weight. Ids
// are checked against the vocabulary as a window is read: opening a corpus reads nothing of it.
// Packed documents (data/token_dataset.h) are the stream's own, or end at the end-of-text id.
#pragma once

#include "data/blend.h"
#include "data/token_dataset.h"
#include "data/token_stream.h"

#include <memory>
#include <vector>

namespace tidal::data {

class StreamDataset final : public TokenDataset {
 public:
  // `hold_out_eval`: the last windows are the eval split (else every window is in both splits,
  // as for a dataset that is all training or all evaluation). `source`: how errors name it.
  StreamDataset(std::unique_ptr<TokenStream> stream, bool hold_out_eval, std::int64_t seq_len, std::int64_t vocab,
                Objective objective, std::uint64_t seed, std::string source, Packing packing = {});

  TokenSample sample(std::int64_t index, Split split) const override;
  std::string describe() const override;
  std::vector<std::int64_t> sample_ids(std::int64_t first, std::int64_t count) const override;
  std::int64_t windows(Split split) const { return split == Split::train ? train_windows_ : eval_windows_; }
  // The window sample `index` of `split` reads.
  std::int64_t window(std::int64_t index, Split split) const;

 private:
  std::unique_ptr<TokenStream> stream_;
  std::string source_;
  bool held_out_;
  std::int64_t train_windows_ = 0, eval_windows_ = 0, eval_first_ = 0;
};

// Sources drawn by weight (data.path = "W1 PATH1 W2 PATH2 ..."): blend sample i of a split is its
// source's next sample of that split.
class BlendedDataset final : public TokenDataset {
 public:
  BlendedDataset(std::vector<std::unique_ptr<StreamDataset>> sources, std::vector<double> weights,
                 std::int64_t seq_len, std::int64_t vocab, Objective objective, std::uint64_t seed,
                 Packing packing = {});

  TokenSample sample(std::int64_t index, Split split) const override;
  std::string describe() const override;
  std::vector<std::int64_t> sample_ids(std::int64_t first, std::int64_t count) const override;
  nlohmann::json record(std::int64_t samples) const override;

 private:
  std::vector<std::unique_ptr<StreamDataset>> sources_;
  Blend train_, eval_;
};

}  // namespace tidal::data
