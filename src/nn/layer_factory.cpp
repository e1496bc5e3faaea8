#include "nn/layer_factory.h"

#include "nn/attention.h"
#include "nn/cross_entropy_loss.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/layernorm.h"
#include "nn/linear.h"
#include "nn/lm_head.h"
#include "nn/moe.h"
#include "nn/rms_norm.h"

namespace tidal::nn {
namespace {

class Identity final : public Module {
 public:
  Tensor forward(const Tensor& x, Context&) override { return x; }
  Tensor backward(const Tensor& dy, Context&) override { return dy; }
};

}  // namespace

std::unique_ptr<TableLookup> SingleDeviceLayers::vocab_embedding(std::int64_t num, std::int64_t dim, ParameterInit init) {
  return std::make_unique<Embedding>(num, dim, init);
}
std::unique_ptr<TableLookup> SingleDeviceLayers::embedding(std::int64_t num, std::int64_t dim, ParameterInit init) {
  return std::make_unique<Embedding>(num, dim, init);
}
std::unique_ptr<Module> SingleDeviceLayers::position_embedding(std::int64_t max_positions, std::int64_t dim,
                                                               ParameterInit init) {
  return std::make_unique<PositionEmbedding>(max_positions, dim, init);
}
std::unique_ptr<Module> SingleDeviceLayers::layer_norm(std::int64_t features, float eps) {
  return std::make_unique<LayerNorm>(features, eps);
}
std::unique_ptr<Module> SingleDeviceLayers::rms_norm(std::int64_t features, float eps) {
  return std::make_unique<RmsNorm>(features, eps);
}
std::unique_ptr<Module> SingleDeviceLayers::dropout(float p) { return std::make_unique<Dropout>(p); }
std::unique_ptr<Module> SingleDeviceLayers::input_linear(std::int64_t in, std::int64_t out, bool bias, ParameterInit init,
                                                         int) {
  return std::make_unique<Linear>(in, out, bias, init);
}
std::unique_ptr<Module> SingleDeviceLayers::output_linear(std::int64_t in, std::int64_t out, bool bias,
                                                          ParameterInit init) {
  return std::make_unique<Linear>(in, out, bias, init);
}
std::unique_ptr<Module> SingleDeviceLayers::hidden_linear(std::int64_t in, std::int64_t out, bool bias,
                                                          ParameterInit init) {
  return std::make_unique<Linear>(in, out, bias, init);
}
std::unique_ptr<Module> SingleDeviceLayers::split_features() { return std::make_unique<Identity>(); }
std::unique_ptr<Module> SingleDeviceLayers::tied_head(TableLookup& embedding, bool bias) {
  return std::make_unique<TiedLmHead>(embedding.table(), bias);
}
std::unique_ptr<Loss> SingleDeviceLayers::cross_entropy(std::int64_t) { return std::make_unique<CrossEntropyLoss>(); }

std::unique_ptr<Module> LayerFactory::untied_head(std::int64_t num, std::int64_t dim, ParameterInit init, bool bias) {
  return std::make_unique<UntiedLmHead>(vocab_embedding(num, dim, init),
                                        [&](TableLookup& table) { return tied_head(table, bias); });
}

std::unique_ptr<Module> LayerFactory::mixture_of_experts(std::int64_t n_embd, const MoeConfig& cfg, ParameterInit init,
                                                         ParameterInit proj_init) {
  return std::make_unique<MixtureOfExperts>(n_embd, cfg, init, proj_init, *this, batch_groups(), expert_group_);
}

std::unique_ptr<Module> LayerFactory::self_attention(int n_head, int n_kv_head, bool causal) {
  return std::make_unique<ScaledDotProductAttention>(n_head, n_kv_head, causal, batch_slice());
}

std::unique_ptr<Module> LayerFactory::rotary(int n_head, int n_kv_head, std::int64_t head_dim, const RotaryConfig& cfg) {
  return std::make_unique<Rotary>(n_head, n_kv_head, head_dim, cfg, batch_slice());
}

std::unique_ptr<LayerFactory> make_single_device_layers() { return std::make_unique<SingleDeviceLayers>(); }

LayerFactory& single_device_layers() {
  static SingleDeviceLayers layers;
  return layers;
}

}  // namespace tidal::nn
