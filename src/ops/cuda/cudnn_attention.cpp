#include "ops/cuda/cudnn_attention.h"

#include "core/error.h"

#include <fmt/format.h>

#if TIDAL_CUDNN
#include "core/cuda/runtime.h"
#include "core/gpu.h"
#include "ops/cuda/attention_heads.h"

#include <cudnn_frontend.h>
#include <dlfcn.h>

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>

// The frontend reaches cuDNN through this handle (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}  // namespace cudnn_frontend
#endif

namespace tidal::ops::cuda {
namespace {

[[noreturn]] void refuse(const std::string& why) {
  throw Error(fmt::format("train.attention = \"cudnn\": {}; set train.attention = \"auto\" (cuDNN where it can, "
                          "tidal's own kernels elsewhere) or \"own\"",
                          why));
}

#if TIDAL_CUDNN
namespace fe = cudnn_frontend;

// The bias of packed documents is [B, 1, T, T]: past this, automatic runs tidal's own kernels,
// which skip the blocks outside a document instead of masking them.
constexpr std::int64_t kMaxBiasBytes = std::int64_t(256) << 20;

// Why cuDNN cannot take the case before any graph is built ("" when it may).
std::string precheck(const AttentionDims& d, DType dtype, const AttentionOptions& opt) {
  if (dtype != DType::bf16 && dtype != DType::f16)
    return fmt::format("cuDNN's fused attention takes bf16 or fp16, and this run's attention is {} (train.precision)",
                       dtype_name(dtype));
  if (opt.key_mask != nullptr) return "batches with key padding masks run on tidal's own kernels only";
  if (d.hd % 8 != 0 || d.hd > 256)
    return fmt::format("cuDNN takes head widths that are multiples of 8 up to 256, not {} (model.n_embd / "
                       "model.n_head)",
                       d.hd);
  const std::int64_t bias_bytes = d.B * d.T * d.T * std::int64_t(dtype_size(dtype));
  if (opt.doc_positions != nullptr && opt.kernels == AttentionKernels::automatic && bias_bytes > kMaxBiasBytes)
    return fmt::format("the packed documents' bias would take {} MiB", bias_bytes >> 20);
  return "";
}

// "" once libcudnn.so.9 has loaded, else why not.
const std::string& library_missing() {
  static const std::string why = [] {
    void* handle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
    if (handle == nullptr)
      return fmt::format("libcudnn.so.9 did not load ({}): install cuDNN 9 (Debian's libcudnn9-cuda-13, or PyPI's "
                         "nvidia-cudnn-cu13 with its lib/ on LD_LIBRARY_PATH)",
                         dlerror());
    fe::cudnn_dlhandle = handle;
    return std::string();
  }();
  return why;
}

void check_status(cudnnStatus_t status, const char* call) {
  TIDAL_CHECK(status == CUDNN_STATUS_SUCCESS, "{} failed: {}", call, fe::detail::get_error_string(status));
}

// One per process, on the compute stream; never destroyed (work may be queued at exit).
cudnnHandle_t handle() {
  static const cudnnHandle_t h = [] {
    cudnnHandle_t made = nullptr;
    check_status(fe::detail::create_handle(&made), "cudnnCreate");
    check_status(fe::detail::set_stream(made, tidal::cuda::compute_stream()), "cudnnSetStream");
    return made;
  }();
  return h;
}

enum Uid : std::int64_t { kQ = 1, kK, kV, kO, kStats, kBias, kDO, kDQ, kDK, kDV };

// Where each operand sits, in elements: qkv rows of W, y rows of C; the queries (and their
// gradients) in qkv's columns, or in a grouped copy [B, T, C] when the head orders differ.
struct Layout {
  std::int64_t B, T, H, Hkv, hd, C, W;
  bool grouped;  // 1 < Hkv < H: cuDNN's head order is not tidal's
  std::vector<std::int64_t> queries() const {
    return grouped ? std::vector<std::int64_t>{T * C, hd, C, 1} : std::vector<std::int64_t>{T * W, hd, W, 1};
  }
  std::vector<std::int64_t> keys() const { return {T * W, hd, W, 1}; }
  std::vector<std::int64_t> outputs() const { return {T * C, hd, C, 1}; }
  std::vector<std::int64_t> stats() const { return {H * T, T, 1, 1}; }
};

Layout layout_of(const AttentionDims& d) {
  return {d.B, d.T, d.H, d.Hkv, d.hd, d.C, d.qkv_width(), d.Hkv > 1 && d.Hkv < d.H};
}

using GraphKey = std::tuple<bool, std::int64_t, std::int64_t, std::int64_t, std::int64_t, std::int64_t, DType, bool, bool>;

struct Plan {
  std::shared_ptr<fe::graph::Graph> graph;
  std::string unsupported;  // cuDNN's reason, or ""
  std::int64_t workspace = 0;
};

std::shared_ptr<fe::graph::Tensor_attributes> operand(fe::graph::Graph& g, const char* name, Uid uid,
                                                      std::vector<std::int64_t> dims,
                                                      std::vector<std::int64_t> strides) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(std::move(dims)).set_stride(
      std::move(strides)));
}

std::shared_ptr<fe::graph::Tensor_attributes> stats_operand(fe::graph::Graph& g, const Layout& l) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name("stats")
                      .set_uid(kStats)
                      .set_dim({l.B, l.H, l.T, 1})
                      .set_stride(l.stats())
                      .set_data_type(fe::DataType_t::FLOAT));
}

std::shared_ptr<fe::graph::Tensor_attributes> bias_operand(fe::graph::Graph& g, const Layout& l) {
  return operand(g, "bias", kBias, {l.B, 1, l.T, l.T}, {l.T * l.T, l.T * l.T, l.T, 1});
}

void describe_forward(fe::graph::Graph& g, const Layout& l, bool causal, bool bias, float scale) {
  const auto q = operand(g, "q", kQ, {l.B, l.H, l.T, l.hd}, l.queries());
  const auto k = operand(g, "k", kK, {l.B, l.Hkv, l.T, l.hd}, l.keys());
  const auto v = operand(g, "v", kV, {l.B, l.Hkv, l.T, l.hd}, l.keys());
  auto options = fe::graph::SDPA_attributes().set_name("attention").set_generate_stats(true).set_attn_scale(scale);
  options.set_causal_mask(causal);
  if (bias) options.set_bias(bias_operand(g, l));
  auto [o, stats] = g.sdpa(q, k, v, options);
  o->set_output(true).set_uid(kO).set_dim({l.B, l.H, l.T, l.hd}).set_stride(l.outputs());
  stats->set_output(true).set_uid(kStats).set_data_type(fe::DataType_t::FLOAT).set_dim({l.B, l.H, l.T, 1}).set_stride(
      l.stats());
}

void describe_backward(fe::graph::Graph& g, const Layout& l, bool causal, bool bias, float scale) {
  const auto q = operand(g, "q", kQ, {l.B, l.H, l.T, l.hd}, l.queries());
  const auto k = operand(g, "k", kK, {l.B, l.Hkv, l.T, l.hd}, l.keys());
  const auto v = operand(g, "v", kV, {l.B, l.Hkv, l.T, l.hd}, l.keys());
  const auto o = operand(g, "o", kO, {l.B, l.H, l.T, l.hd}, l.outputs());
  const auto dout = operand(g, "do", kDO, {l.B, l.H, l.T, l.hd}, l.outputs());
  auto options = fe::graph::SDPA_backward_attributes()
                     .set_name("attention_backward")
                     .set_attn_scale(scale)
                     .set_deterministic_algorithm(true);
  options.set_causal_mask(causal);
  if (bias) options.set_bias(bias_operand(g, l));
  auto [dq, dk, dv] = g.sdpa_backward(q, k, v, o, dout, stats_operand(g, l), options);
  dq->set_output(true).set_uid(kDQ).set_dim({l.B, l.H, l.T, l.hd}).set_stride(l.queries());
  dk->set_output(true).set_uid(kDK).set_dim({l.B, l.Hkv, l.T, l.hd}).set_stride(l.keys());
  dv->set_output(true).set_uid(kDV).set_dim({l.B, l.Hkv, l.T, l.hd}).set_stride(l.keys());
}

Plan build(bool backward, const Layout& l, DType dtype, bool causal, bool bias) {
  Plan p;
  p.graph = std::make_shared<fe::graph::Graph>();
  fe::graph::Graph& g = *p.graph;
  g.set_io_data_type(dtype == DType::bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  const float scale = 1.0f / std::sqrt(float(l.hd));
  if (backward) {
    describe_backward(g, l, causal, bias, scale);
  } else {
    describe_forward(g, l, causal, bias, scale);
  }
  const std::function<fe::error_t()> steps[] = {
      [&] { return g.validate(); },
      [&] { return g.build_operation_graph(handle()); },
      [&] { return g.create_execution_plans({fe::HeurMode_t::A}); },
      [&] { return g.check_support(); },
      [&] { return g.build_plans(); },
      [&] { return g.get_workspace_size(p.workspace); }};
  for (const std::function<fe::error_t()>& step : steps) {
    if (fe::error_t e = step(); e.is_bad()) {
      p.unsupported = fmt::format("cuDNN {} for this shape: {}", backward ? "backward" : "forward", e.get_message());
      p.graph.reset();
      return p;
    }
  }
  return p;
}

// The kept plan for (direction, shape), built on first use.
const Plan& plan(bool backward, const AttentionDims& d, DType dtype, const AttentionOptions& opt) {
  static std::mutex mutex;
  static std::map<GraphKey, Plan> plans;
  const bool bias = opt.doc_positions != nullptr;
  const GraphKey key{backward, d.B, d.T, d.H, d.Hkv, d.hd, dtype, opt.causal, bias};
  std::lock_guard lock(mutex);
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, build(backward, layout_of(d), dtype, opt.causal, bias)).first;
  return it->second;
}

// Why cuDNN cannot take the case, or "" (the library loaded and both directions' plans built).
std::string unsupported(const AttentionDims& d, DType dtype, const AttentionOptions& opt) {
  if (std::string why = precheck(d, dtype, opt); !why.empty()) return why;
  if (const std::string& why = library_missing(); !why.empty()) return why;
  for (bool backward : {false, true})
    if (const Plan& p = plan(backward, d, dtype, opt); !p.unsupported.empty()) return p.unsupported;
  return "";
}

void execute(const Plan& p, std::unordered_map<std::int64_t, void*>& pack) {
  TIDAL_ASSERT(p.graph != nullptr, "cuDNN attention ran on an unsupported plan: {}", p.unsupported);
  Tensor workspace;
  if (p.workspace > 0) workspace = Tensor::empty({p.workspace}, DType::u8, gpu_allocator());
  const fe::error_t e = p.graph->execute(handle(), pack, workspace.defined() ? workspace.raw() : nullptr);
  TIDAL_CHECK(e.is_good(), "cuDNN attention failed: {}", e.err_msg);
}

char* bytes(const Tensor& t) { return static_cast<char*>(t.raw()); }

// The operands every direction shares: q (tidal's columns, or a grouped copy kept in `grouped`),
// k, v, and the documents' bias.
struct Inputs {
  Tensor grouped_queries, bias;
};
Inputs inputs(std::unordered_map<std::int64_t, void*>& pack, const Tensor& qkv, const Layout& l,
              const AttentionOptions& opt) {
  Inputs in;
  const std::size_t e = dtype_size(qkv.dtype());
  pack[kQ] = qkv.raw();
  if (l.grouped) {
    in.grouped_queries = Tensor::empty({l.B, l.T, l.C}, qkv.dtype(), gpu_allocator());
    copy_heads(in.grouped_queries.raw(), l.C, qkv.raw(), l.W, qkv.dtype(), l.B * l.T, l.H, l.Hkv, l.hd, true);
    pack[kQ] = in.grouped_queries.raw();
  }
  pack[kK] = bytes(qkv) + l.C * e;
  pack[kV] = bytes(qkv) + (l.C + l.Hkv * l.hd) * e;
  if (opt.doc_positions != nullptr) {
    in.bias = Tensor::empty({l.B, 1, l.T, l.T}, qkv.dtype(), gpu_allocator());
    document_bias(in.bias, *opt.doc_positions);
    pack[kBias] = in.bias.raw();
  }
  return in;
}
#endif  // TIDAL_CUDNN

}  // namespace

bool attention_on_cudnn(const AttentionDims& d, DType dtype, const AttentionOptions& opt) {
  if (opt.kernels == AttentionKernels::own) return false;
#if TIDAL_CUDNN
  const std::string why = unsupported(d, dtype, opt);
  if (why.empty()) return true;
  if (opt.kernels == AttentionKernels::cudnn) refuse(why);
  return false;
#else
  (void)d;
  (void)dtype;
  if (opt.kernels == AttentionKernels::cudnn)
    refuse("this build has no cuDNN attention (scripts/cudnn-frontend.sh installs cudnn-frontend's headers; then "
           "build again with nvcc and cuDNN 9's cudnn.h)");
  return false;
#endif
}

#if TIDAL_CUDNN
void cudnn_attention_forward(Tensor& y, Tensor& lse, const Tensor& qkv, const AttentionDims& d,
                             const AttentionOptions& opt) {
  const Layout l = layout_of(d);
  std::unordered_map<std::int64_t, void*> pack;
  const Inputs in = inputs(pack, qkv, l, opt);
  const Tensor stats = l.grouped ? Tensor::empty(lse.shape(), DType::f32, gpu_allocator()) : lse;
  pack[kO] = y.raw();
  pack[kStats] = stats.raw();
  execute(plan(false, d, qkv.dtype(), opt), pack);
  // lse[b, h] = stats[b, output_head(h)]: rows of H heads of T.
  if (l.grouped) copy_heads(stats.raw(), l.H * l.T, lse.raw(), l.H * l.T, DType::f32, l.B, l.H, l.Hkv, l.T, false);
}

void cudnn_attention_backward(Tensor& dqkv, const Tensor& dy, const Tensor& qkv, const Tensor& y, const Tensor& lse,
                              const AttentionDims& d, const AttentionOptions& opt) {
  const Layout l = layout_of(d);
  const std::size_t e = dtype_size(qkv.dtype());
  std::unordered_map<std::int64_t, void*> pack;
  const Inputs in = inputs(pack, qkv, l, opt);
  Tensor stats = lse, grouped_dq;
  pack[kDQ] = dqkv.raw();
  if (l.grouped) {
    stats = Tensor::empty(lse.shape(), DType::f32, gpu_allocator());
    copy_heads(stats.raw(), l.H * l.T, lse.raw(), l.H * l.T, DType::f32, l.B, l.H, l.Hkv, l.T, true);
    grouped_dq = Tensor::empty({l.B, l.T, l.C}, qkv.dtype(), gpu_allocator());
    pack[kDQ] = grouped_dq.raw();
  }
  pack[kO] = y.raw();
  pack[kDO] = dy.raw();
  pack[kStats] = stats.raw();
  pack[kDK] = bytes(dqkv) + l.C * e;
  pack[kDV] = bytes(dqkv) + (l.C + l.Hkv * l.hd) * e;
  execute(plan(true, d, qkv.dtype(), opt), pack);
  if (l.grouped) copy_heads(grouped_dq.raw(), l.C, dqkv.raw(), l.W, qkv.dtype(), l.B * l.T, l.H, l.Hkv, l.hd, false);
}
#else
void cudnn_attention_forward(Tensor&, Tensor&, const Tensor&, const AttentionDims&, const AttentionOptions&) {
  TIDAL_ASSERT(false, "cuDNN attention called in a build without cuDNN");
}
void cudnn_attention_backward(Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              const AttentionDims&, const AttentionOptions&) {
  TIDAL_ASSERT(false, "cuDNN attention called in a build without cuDNN");
}
#endif

}  // namespace tidal::ops::cuda
