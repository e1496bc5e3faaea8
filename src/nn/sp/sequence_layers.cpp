#include "nn/sp/sequence_layers.h"

#include "nn/cross_entropy_loss.h"
#include "nn/dropout.h"
#include "nn/sp/ring_attention.h"
#include "nn/sp/ulysses_attention.h"
#include "nn/tp/mappings.h"

namespace tidal::nn::sp {
namespace {

// Whole weights as on one device; what reads the batch or attends works on the ring's positions.
class SequenceLayers final : public SingleDeviceLayers {
 public:
  SequenceLayers(comm::Communicator& ring, bool zigzag, parallel::SequenceMode mode)
      : ring_(ring),
        positions_{.position_parts = ring.size(), .position_index = ring.rank(), .zigzag = zigzag},
        mode_(mode) {}

  std::unique_ptr<TableLookup> vocab_embedding(std::int64_t num, std::int64_t dim, ParameterInit init) override {
    return std::make_unique<Embedding>(num, dim, init, positions_);
  }
  std::unique_ptr<TableLookup> embedding(std::int64_t num, std::int64_t dim, ParameterInit init) override {
    return std::make_unique<Embedding>(num, dim, init, positions_);
  }
  std::unique_ptr<Module> position_embedding(std::int64_t max_positions, std::int64_t dim, ParameterInit init) override {
    return std::make_unique<PositionEmbedding>(max_positions, dim, init, positions_);
  }
  std::unique_ptr<Module> dropout(float p) override { return std::make_unique<Dropout>(p, 0, positions_); }
  std::unique_ptr<Module> self_attention(int n_head, int n_kv_head, bool causal) override {
    if (mode_ == parallel::SequenceMode::ulysses)
      return std::make_unique<UlyssesSelfAttention>(n_head, n_kv_head, causal, ring_, positions_);
    return std::make_unique<RingSelfAttention>(n_head, n_kv_head, causal, ring_, positions_);
  }
  std::unique_ptr<Module> split_features() override { throw Error(no_images()); }
  std::unique_ptr<Loss> cross_entropy(std::int64_t) override {
    return std::make_unique<CrossEntropyLoss>(positions_, std::vector<comm::Communicator*>{&ring_});
  }
  std::vector<comm::Communicator*> batch_groups() override { return {&ring_}; }
  void split_hidden(Parameter&) override { throw Error(no_images()); }
  BatchSlice batch_slice() const override { return positions_; }
  // [B, T / N, ...] on each rank -> [B, T, ...] in the sequence's order.
  Tensor gather_features(const Tensor& part) override {
    const Tensor places = tp::all_gather_along(part, ring_, 1);  // place by place
    if (!positions_.zigzag) return places;
    Tensor whole = Tensor::empty(places.shape(), places.dtype());
    const std::int64_t local = part.dim(1);
    for (int p = 0; p < ring_.size(); ++p)
      positions_.at_place(p).put_positions(whole, places.slice(1, p * local, (p + 1) * local));
    return whole;
  }

 private:
  static std::string no_images() {
    return "parallel.sequence > 1 splits token sequences; an image classifier's patches and class token are not "
           "split: use parallel.data or parallel.tensor.size for it";
  }

  comm::Communicator& ring_;
  BatchSlice positions_;
  parallel::SequenceMode mode_;
};

}  // namespace

std::unique_ptr<LayerFactory> layers_sequence(comm::Communicator& ring, bool zigzag, parallel::SequenceMode mode) {
  return std::make_unique<SequenceLayers>(ring, zigzag, mode);
}

}  // namespace tidal::nn::sp
