// The layers a transformer is built from, made for one parallel layout. GPT, BERT and ViT are
// written once against this interface and take their layers from the factory that the
// [parallel] section selects (nn/parallel_layers.h); a model file never branches on the layout.
//
// Two activation layouts run through a model (colossal-ai.txt sec. III-A):
//   H, the hidden states of the residual stream: [B', T', C'];
//   F, the output of an input_linear: [B', T', out'], features split so that attention heads,
//     the MLP's GELU and a split softmax work locally.
// B' and T' are this rank's share of the replica's micro-batch (batch_slice()), C' and out' its
// share of the features. Single device and 1D keep every sample (B' = B); 1D keeps H whole and
// splits F; 2D / 2.5D split both the same way (H = F); 3D alternates two orientations. Sequence
// parallelism keeps features whole and splits positions (T' = T / N) in both.
//
// Layers that read the batch directly (embeddings of token ids, the attention's key mask, the
// loss's targets) take the replica's whole micro-batch and pick their part themselves.
#pragma once

#include "nn/batch_slice.h"
#include "nn/embedding.h"
#include "nn/loss.h"
#include "nn/rotary.h"

#include <memory>

namespace tidal::nn {

struct MoeConfig;

class LayerFactory {
 public:
  virtual ~LayerFactory() = default;

  // ids [B, T] (the replica's micro-batch) -> H. The table's rows may be split (vocab
  // parallelism) so that tied_head's logits come out split by class.
  virtual std::unique_ptr<TableLookup> vocab_embedding(std::int64_t num, std::int64_t dim, ParameterInit init) = 0;
  // ids [B, T] -> H with the table's rows whole (small tables: BERT's token types).
  virtual std::unique_ptr<TableLookup> embedding(std::int64_t num, std::int64_t dim, ParameterInit init) = 0;
  // H -> H: adds learned positions [0, T).
  virtual std::unique_ptr<Module> position_embedding(std::int64_t max_positions, std::int64_t dim,
                                                     ParameterInit init) = 0;
  virtual std::unique_ptr<Module> layer_norm(std::int64_t features, float eps) = 0;
  virtual std::unique_ptr<Module> rms_norm(std::int64_t features, float eps) = 0;
  virtual std::unique_ptr<Module> dropout(float p) = 0;

  // H -> F. `segments` > 1 splits each of that many equal parts of the output separately (a
  // fused qkv projection keeps q, k and v of the same heads together).
  virtual std::unique_ptr<Module> input_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init,
                                               int segments = 1) = 0;
  // qkv F [B', T', (H' + 2 Hkv') hd] (this rank's n_head query and n_kv_head key / value heads,
  // nn/attention.h) -> F [B', T', H' hd]: scaled dot-product attention, causal or under the
  // batch's key padding mask. The default attends locally over batch_slice()'s samples;
  // sequence parallelism passes keys around its ring instead.
  virtual std::unique_ptr<Module> self_attention(int n_head, int n_kv_head, bool causal);
  // qkv F -> F, rotated in place by the global positions of batch_slice() (nn/rotary.h).
  std::unique_ptr<Module> rotary(int n_head, int n_kv_head, std::int64_t head_dim, const RotaryConfig& cfg);
  // H -> H: a mixture of experts (nn/moe.h) in place of an MLP, its experts' linears made here, its
  // router's statistics summed over batch_groups().
  std::unique_ptr<Module> mixture_of_experts(std::int64_t n_embd, const MoeConfig& cfg, ParameterInit init,
                                             ParameterInit proj_init);
  // The ranks holding other parts of the replica's micro-batch with whole features (sequence
  // parallelism's ring), over which a layer that counts the batch's tokens sums its counts.
  virtual std::vector<comm::Communicator*> batch_groups() { return {}; }
  // The ranks that split each mixture's experts (parallel.expert; nn/moe.h); null: each rank
  // holds them all.
  void set_expert_group(comm::Communicator* group) { expert_group_ = group; }
  // F -> H: the linear after an input_linear (attention and MLP output projections).
  virtual std::unique_ptr<Module> output_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init) = 0;
  // H -> H: a linear whose output is hidden states again (BERT's MLM transform).
  virtual std::unique_ptr<Module> hidden_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init) = 0;
  // The replica's whole [B, ..., features] -> F (ViT's patches, before an output_linear). The
  // input is data: backward may return no gradient.
  virtual std::unique_ptr<Module> split_features() = 0;

  // H -> F logits against a table made by vocab_embedding (tied weights), optionally with a
  // bias [num] named "bias".
  virtual std::unique_ptr<Module> tied_head(TableLookup& embedding, bool bias) = 0;
  // H -> F logits against a [num, dim] table of the head's own (untied), split as
  // vocab_embedding splits one, optionally with a bias [num] named "bias".
  std::unique_ptr<Module> untied_head(std::int64_t num, std::int64_t dim, ParameterInit init, bool bias);
  // F logits [..., classes'] -> the mean cross-entropy [1] over the replica's micro-batch
  // (targets from the batch; -100 ignored), equal on every rank of the model replica.
  virtual std::unique_ptr<Loss> cross_entropy(std::int64_t classes) = 0;

  // Splits a parameter of H's trailing shape [..., C] (ViT's class token and positions) as H
  // splits features. Call between add_parameter and materialize.
  virtual void split_hidden(Parameter& p) = 0;
  // How many ways F splits features: attention runs n_head / feature_parts() heads per rank.
  virtual int feature_parts() const = 0;
  virtual BatchSlice batch_slice() const = 0;
  // The replica's whole [B, ..., out] from this rank's F-layout part (logits, to inspect or
  // compare them). Collective over the tensor group.
  virtual Tensor gather_features(const Tensor& part) = 0;

 private:
  comm::Communicator* expert_group_ = nullptr;
};

// Plain single-device layers (nn::Linear, nn::LayerNorm, ...). A layout that keeps weights whole
// (sequence parallelism) derives from it and replaces what reads the batch or attends.
class SingleDeviceLayers : public LayerFactory {
 public:
  std::unique_ptr<TableLookup> vocab_embedding(std::int64_t num, std::int64_t dim, ParameterInit init) override;
  std::unique_ptr<TableLookup> embedding(std::int64_t num, std::int64_t dim, ParameterInit init) override;
  std::unique_ptr<Module> position_embedding(std::int64_t max_positions, std::int64_t dim, ParameterInit init) override;
  std::unique_ptr<Module> layer_norm(std::int64_t features, float eps) override;
  std::unique_ptr<Module> rms_norm(std::int64_t features, float eps) override;
  std::unique_ptr<Module> dropout(float p) override;
  std::unique_ptr<Module> input_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init,
                                       int segments = 1) override;
  std::unique_ptr<Module> output_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init) override;
  std::unique_ptr<Module> hidden_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init) override;
  std::unique_ptr<Module> split_features() override;
  std::unique_ptr<Module> tied_head(TableLookup& embedding, bool bias) override;
  std::unique_ptr<Loss> cross_entropy(std::int64_t classes) override;
  void split_hidden(Parameter&) override {}
  int feature_parts() const override { return 1; }
  BatchSlice batch_slice() const override { return {}; }
  Tensor gather_features(const Tensor& part) override { return part; }
};

// A new single-device factory, and a shared one (the factory is stateless).
std::unique_ptr<LayerFactory> make_single_device_layers();
LayerFactory& single_device_layers();

}  // namespace tidal::nn
