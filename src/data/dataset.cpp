#include "data/dataset.h"

#include "config/model_types.h"
#include "core/error.h"
#include "data/images.h"
#include "data/markov.h"
#include "data/token_file.h"

namespace tidal::data {

std::unique_ptr<Dataset> make_dataset(const config::Config& cfg) {
  const auto& m = cfg.model;
  const auto& d = cfg.data;
  const Objective objective =
      config::model_task(m.type) == config::ModelTask::masked_lm ? Objective::masked : Objective::causal;
  if (d.kind == config::DataKind::markov) {
    // BERT reserves the last id as its mask token; the chain uses the others.
    const std::int64_t states = objective == Objective::masked ? m.vocab_size - 1 : m.vocab_size;
    return std::make_unique<MarkovDataset>(states, d.markov_branching, m.seq_len, m.vocab_size, objective, d.seed);
  }
  if (d.kind == config::DataKind::tokens || d.kind == config::DataKind::text) {
    return std::make_unique<TokenFileDataset>(
        d.path, d.kind == config::DataKind::tokens ? TokenFileDataset::Format::tokens : TokenFileDataset::Format::text, m.seq_len,
        m.vocab_size, objective, d.seed);
  }
  if (d.kind == config::DataKind::images) {
    const ImageShape shape{m.channels, m.image_size, m.image_size, m.num_classes};
    if (d.path.empty()) return std::make_unique<ImageDataset>(shape, d.seed);
    return std::make_unique<ImageDataset>(d.path, shape, d.seed);
  }
  throw Error(fmt::format("data.kind = \"{}\" is not one of markov | tokens | text | images", d.kind));
}

}  // namespace tidal::data
