// One sequence through a causal language model, a position at a time, with a KV cache, on the
// host in fp32: the step under text generation (engine/inference/sampler.h). A family that generates text
// gives its decoder in its spec (models/family.h). A decoder computes exactly its
// model's training forward, so each new token costs one position through the blocks, attending
// over the keys and values the cache holds for the positions before it.
// Invariant: the cache holds positions [0, positions()) of the sequence fed since reset().
#pragma once

#include "core/tensor.h"
#include "models/model.h"

#include <memory>
#include <string>

namespace tidal::models {

class Decoder {
 public:
  virtual ~Decoder() = default;

  virtual std::int64_t vocab_size() const = 0;
  // The longest sequence: learned positions (GPT), or the positions the model was made for (Llama).
  virtual std::int64_t max_positions() const = 0;
  std::int64_t positions() const { return positions_; }  // fed since reset()
  void reset() { positions_ = 0; }

  // Runs `token` through the blocks at position positions(), appending its keys and values to the
  // cache. A token outside the vocabulary, or a full cache, is a tidal::Error.
  void feed(std::int32_t token);
  // The logits [V] of the token after the last one fed (a view, valid until the next feed).
  virtual Tensor logits() = 0;

 protected:
  // The model's step at position t for `token` (checked), the residual stream left for logits().
  virtual void step(std::int32_t token, std::int64_t t) = 0;

 private:
  std::int64_t positions_ = 0;
};

// A parameter's tensor for a decoder: fp32, whole, on the host (copied there from a GPU; else a
// view, so a decoder shares its model's weights); a tidal::Error naming it when the process does
// not hold it so (chunks, shards).
Tensor host_weight(Model& model, const std::string& name, const Shape& shape);

// Causal attention of one position's queries q [H hd] over the cache's keys and values of
// positions [0, t] (k, v: [P, Hkv hd] rows), query head h reading kv head h % Hkv (tidal's order
// of grouped queries, nn/attention.h) -> y [H hd], heads in ops::output_head's order.
// `scores` holds at least t + 1 floats.
void attend_cached(const float* q, const float* k, const float* v, std::int64_t t, int n_head, int n_kv_head,
                   std::int64_t head_dim, float* scores, float* y);

}  // namespace tidal::models
