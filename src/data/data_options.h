// A run's data as the datasets take it: the [data] section's options with what the model asks of
// them (its objective and shapes). config/options.h makes them from a Config.
#pragma once

#include "data/chat_dataset.h"
#include "data/data_kind.h"
#include "data/dataset.h"
#include "data/images.h"
#include "data/token_dataset.h"

#include <cstdint>
#include <memory>
#include <string>

namespace tidal::data {

struct DataOptions {
  DataKind kind = DataKind::markov;
  std::string path;       // data.path: shards, a prefix, a file, or a blend of them (data/blend.h)
  std::string eval_path;  // data.eval_path: token data to evaluate on; "" = held out from `path`
  std::uint64_t seed = 1;
  int markov_branching = 4;  // successors per state of the synthetic Markov language
  Packing packing{};         // documents kept apart (data.cross_document_attention = false, data.eod_id)
  ChatOptions chat{};        // kind = chat: data.tokenizer, data.chat_template
  Objective objective = Objective::causal;  // masked for a masked language model
  std::int64_t seq_len = 64, vocab_size = 128;
  ImageShape images{3, 32, 32, 10};  // kind = images
};

std::unique_ptr<Dataset> make_dataset(const DataOptions& options);

// `count` samples of the data's shapes whose values are never read, from `memory`: a planned
// step's batch (on meta memory, core/device.h), with the fields its dataset's batches have.
nn::Batch shaped_batch(const DataOptions& options, std::int64_t count, Allocator& memory);

}  // namespace tidal::data
