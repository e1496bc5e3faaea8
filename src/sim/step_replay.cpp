#include "sim/step_replay.h"

#include "config/options.h"
#include "core/dtype.h"
#include "models/factory.h"
#include "models/registry.h"
#include "ops/attention.h"
#include "pipeline/schedule.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>

namespace tidal::sim {
namespace {

// The activation pool's current and peak bytes. A tensor is a shared handle that gives its bytes
// back when the last holder lets go, as Tensor's storage does.
class Tally {
  struct Held {
    Tally* tally;
    double bytes;
    Held(Tally* t, double b) : tally(t), bytes(b) {}
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    ~Held() { tally->current -= bytes; }
  };

 public:
  using Act = std::shared_ptr<Held>;
  // What the elementwise ops that make the tensors cost: each written once and read once, at the
  // rate of its dtype and size (sim/hardware.h); nothing without a hardware.
  struct Rate {
    const Hardware* hardware = nullptr;
    DType dtype = DType::f32;
    double element = 4;  // bytes of one element of `dtype`
  } rate;
  Act make(double bytes) {
    if (rate.hardware && bytes > 0)
      made_seconds += 2 * bytes / rate.hardware->elementwise_rate(rate.dtype, bytes / rate.element);
    return scratch(bytes);
  }
  // An op's own copy of its operands: held, but its time is in the op's rate (calibrate times
  // the op on such operands, copies and all), not in the bytes made.
  Act scratch(double bytes) {
    if (bytes <= 0) return nullptr;
    current += bytes;
    peak = std::max(peak, current);
    return std::make_shared<Held>(this, bytes);  // one allocation: the planner makes millions
  }
  double current = 0, peak = 0, made_seconds = 0;
};
using Act = Tally::Act;
using Keep = std::vector<Act>;  // what one module call saves for its backward

// How the layout's layer factory splits a layer (nn/layer_factory.h, nn/tp/, nn/sp/).
enum class Split {
  none,  // one device, data parallelism, and the sequence layers (only attention differs)
  d1,    // Megatron's columns and rows (nn/tp/linear_1d.h)
  grid,  // 2D and 2.5D: SUMMA on blocks (nn/tp/summa.h), split norms (nn/tp/feature_split.h)
  cube,  // 3D: inputs gathered, outputs reduce-scattered, weight rows broadcast (nn/tp/layers_3d.cpp)
};

// One rank's sizes for one micro-batch: rows = its samples x its positions, the widths of what it
// computes (its heads, its share of the MLP and of the vocabulary), bytes per element.
struct Sizes {
  Split split = Split::none;
  double rows = 0, samples = 0, positions = 0;
  double width = 0;      // the hidden state's features on this rank
  double qkv = 0;        // (H + 2 Hkv) hd over the rank's heads
  double kv = 0;         // 2 Hkv hd, the keys and values of the rank's heads
  double attention = 0;  // H hd over the rank's heads
  double heads = 0;      // query heads on this rank
  double fc = 0;         // the MLP's first projection (2 x hidden for SwiGLU)
  double hidden = 0;     // the MLP's hidden width
  double vocab = 0;      // logits per row on this rank (padding included)
  double vocab_real = 0;  // of them, classes below the vocabulary (the rest is padding)
  double e = 4;          // bytes of an activation element (the compute precision)
  // The grid's side, depth and whether weights come in depth slices (2.5D); the sequence ring.
  double q = 1, depth = 1;
  bool sliced = false;
  bool keep_gathered = false;  // 3D: a linear's gathered input kept for backward
  int sequence = 1;
  double tensor = 1;  // the tensor group's size
  bool ulysses = false;
  bool glu = false, rms = false, pre_norm = true, dropout = false, selective = false, causal = true;
  int norm_stats = 2;  // LayerNorm keeps mean and rstd per row, RMSNorm rstd
  models::Anatomy anatomy;  // the family's parts (models/registry.h)
  int loss_chunks = 1;
  bool offload_checkpoints = false;
  // The ops widen bf16 / fp16 operands to fp32 copies (a CPU without bf16 instructions: ops/cpu/
  // gemm.cpp, attention.cpp), and the chunk keeper hands each module fresh gradients in the
  // compute precision for its backward (memory/chunk_manager.cpp's access, stored and let go after).
  bool widen = false, module_grads = false;
  bool cpu = true;              // ops/cpu/: an embedding's gradient sums in an fp32 copy of a bf16 table
  double positions_table = 0;  // this rank's learned-position table (elements)
  double weight_parts = 1;  // a linear's weight [out, in] is out x in / weight_parts on this rank
  double table = 0;         // this rank's embedding table (elements)
  bool tied = false;        // the table is also the head's weight on this rank
};

constexpr double kStat = 4;  // fp32 per-row figures (mean, rstd, log-sum-exp, losses)

struct Replay {
  Tally& t;
  const Sizes& s;
  Traffic& traffic;
  const Costs* costs = nullptr;
  double gemm_seconds = 0, attention_seconds = 0;

  // A collective of this step on the tensor group (1D), the ring, ...
  void tensor_all_reduce(double elements, double bytes) {
    traffic.add("tensor", int(s.tensor), "all_reduce", elements, bytes);
  }

  Act act(double width) const { return t.make(s.rows * width * s.e); }
  // A product c = a b whose operands the op widens to fp32 first (elements of each).
  // `times` such products, one after another (SUMMA's steps, a 3D product's row blocks).
  void gemm(double a, double b, double c, double times = 1) {
    if (costs && a > 0 && b > 0 && c > 0) {  // a = m k, b = k n, c = m n
      const double m = std::sqrt(a * c / b), n = std::sqrt(b * c / a), k = std::sqrt(a * b / c);
      gemm_seconds += times * 2 * m * n * k / costs->hardware->gemm_rate(costs->dtype, m, n, k);
    }
    if (!s.widen) return;
    Act a32 = t.scratch(a * 4), b32 = t.scratch(b * 4), c32 = t.scratch(c * 4);
  }
  // The gradients a module's backward gets (chunk keeper): a weight of `weight` and a bias of `bias` elements.
  Act grads(double weight, double bias = 0) { return s.module_grads ? t.make((weight + bias) * s.e) : nullptr; }
  Act f32(double width) const { return t.make(s.rows * width * 4); }
  Act scratch32(double width) const { return t.scratch(s.rows * width * 4); }  // an op's widened operand
  // ctx.as(x, fp32): a widened copy unless activations are fp32 already.
  Act widened(const Act& x, double width) const { return s.e == 4 ? x : f32(width); }

  // --- norms: nn/layernorm.cpp, nn/rms_norm.cpp; split over a grid's columns: nn/tp/feature_split.cpp,
  // nn/tp/split_rms_norm.cpp (fp32 loops, the row statistics summed over the row).
  bool split_norms() const { return s.split == Split::grid || s.split == Split::cube; }
  // A split norm's per-row sums over the ranks holding the row's other features.
  void feature_sums() {
    traffic.add(s.split == Split::cube ? "tensor_y" : "tensor_row", int(s.q), "all_reduce", s.rows * (s.rms ? 1 : 2),
                kStat);
  }
  Act norm_forward(const Act& x, Keep& k) {
    if (!split_norms()) {
      Act y = act(s.width);
      k = {x, t.make(s.rows * kStat * s.norm_stats)};
      return y;
    }
    Act x32 = widened(x, s.width);
    Act stats = t.make(s.rows * kStat * (s.rms ? 1 : 2));
    feature_sums();
    Act y = f32(s.width);
    if (s.rms) k = {x32, t.make(s.rows * kStat)};
    else k = {f32(s.width), t.make(s.rows * kStat)};  // xhat, rstd
    return s.e == 4 ? y : act(s.width);
  }
  Act norm_backward(Keep& k) {
    if (!split_norms()) {
      Act dx = act(s.width);
      k.clear();
      return dx;
    }
    Act dy32 = s.e == 4 ? nullptr : f32(s.width);
    Act sums = t.make(s.rows * kStat * (s.rms ? 1 : 2));
    feature_sums();
    Act dx = f32(s.width);
    k.clear();
    return s.e == 4 ? dx : act(s.width);
  }

  // --- linears. `weight`: elements of this rank's block of W (the grid's SUMMA moves blocks).
  enum class Role { input, output };  // column- or row-parallel in 1D
  // `table`: the head's weight is the embedding's table, whole blocks even under 2.5D's slices.
  Act linear_forward(const Act& x, double in, double out, double weight, Role role, Keep& k, bool table = false) {
    const bool sliced = s.sliced && !table;
    k = {x};
    switch (s.split) {
      case Split::none: {
        Act y = act(out);
        gemm(s.rows * in, weight, s.rows * out);
        return y;
      }
      case Split::d1: {
        Act y = act(out);
        gemm(s.rows * in, weight, s.rows * out);
        if (role == Role::input) return y;
        tensor_all_reduce(s.rows * out, s.e);  // ReduceFromGroup: the partial summed in place
        return y;
      }
      case Split::grid: {
        Act y = act(out);
        Act scratch = act(out);
        const int q = int(s.q), d = int(s.depth);
        // For each l: W_lj down the column (root: row l), the products summed along the row to (i, l).
        traffic.add("tensor_col", q, "broadcast", weight, s.e, q, -1, 1);
        traffic.add("tensor_row", q, "reduce", s.rows * out, s.e, q, -1, 1);
        if (!sliced) {
          Act w = t.make(weight * s.e);  // W_lj received down the column
          gemm(s.rows * in, weight, s.rows * out, s.q);  // one product per step l
          return y;
        }
        traffic.add("tensor_depth", d, "broadcast", weight, s.e, q * d, -1, q);  // each slice over the depth
        Act panel = act(out / s.depth);
        Act mine = t.make(weight * s.e);    // slice k of W_lj down the column
        Act slice = t.make(weight * s.e);  // and over the depth group
        gemm(s.rows * in, weight, s.rows * out / s.depth, s.q * s.depth);
        return y;
      }
      case Split::cube: {
        const double l = s.q;
        const Cube3d o = orientation(role);
        traffic.add(o.c, int(l), "all_gather", s.rows * in, s.e, 1, l * s.rows * in);
        traffic.add("tensor_x", int(l), "broadcast", weight, s.e, l, -1, 1);  // W's row blocks from their owners
        traffic.add(o.b, int(l), "reduce_scatter", l * s.rows * out, s.e);
        Act xg = gather(in);
        if (s.keep_gathered) k = {xg};
        Act p = t.make(l * s.rows * out * s.e), panel = t.make(s.rows * out * s.e);
        {
          Act w = t.make(weight * s.e);  // row block r of W from its owner
          gemm(l * s.rows * in, weight, s.rows * out, l);  // one per row block of W
        }
        return scatter(out);
      }
    }
    return nullptr;
  }
  // A 3D linear's groups (nn/tp/layers_3d.cpp's Orientation): inputs split over b, samples
  // gathered over c; an input linear goes from orientation A to B, an output linear back.
  struct Cube3d {
    const char* b;
    const char* c;
  };
  static Cube3d orientation(Role role) {
    return role == Role::input ? Cube3d{"tensor_y", "tensor_z"} : Cube3d{"tensor_z", "tensor_y"};
  }
  // nn/tp/mappings.cpp: all_gather_along / reduce_scatter_along over l ranks, dimension 0 (the
  // collective reads its input in place and makes the gathered or reduced buffer).
  Act gather(double width) { return t.make(s.q * s.rows * width * s.e); }
  Act scatter(double width) { return act(width); }
  // `own_grads`: the weight's gradient is this module's alone (not a table the head shares).
  Act linear_backward(double in, double out, double weight, Role role, Keep& k, bool own_grads = true,
                      bool table = false) {
    const bool sliced = s.sliced && !table;
    Act g = own_grads ? grads(weight, out) : nullptr;
    Act dx = s.split == Split::cube ? nullptr : act(in);
    switch (s.split) {
      case Split::none:
      case Split::d1:
        gemm(s.rows * out, weight, s.rows * in);  // dx = dy W
        gemm(s.rows * out, s.rows * in, weight);  // dW += dy^T x
        if (s.split == Split::d1 && role == Role::input) {
          tensor_all_reduce(s.rows * in, s.e);  // CopyToGroup: this rank's part summed in place
          k.clear();
          return dx;
        }
        break;
      case Split::grid: {
        const int q = int(s.q), d = int(s.depth);
        // For each l: dY_il along the row, W_lj down the column, dW's share summed down the column
        // (sliced: each slice over the depth first, and down the column by the layer holding it).
        traffic.add("tensor_row", q, "broadcast", s.rows * out, s.e, q, -1, 1);
        traffic.add("tensor_col", q, "broadcast", weight, s.e, q, -1, 1);
        traffic.add("tensor_col", q, "reduce", weight, s.e, q, -1, 1);
        if (sliced) {
          traffic.add("tensor_depth", d, "broadcast", weight, s.e, q * d, -1, q);
          traffic.add("tensor_depth", d, "reduce", weight, s.e, q * d, -1, q);
        }
        Act dw = t.make(weight * s.e);
        Act dy = act(out);             // dY_il along the row
        Act w = t.make(weight * s.e);  // W_lj down the column
        if (sliced) {
          Act panel = act(out / s.depth);
          Act slice = t.make(weight * s.e);
          gemm(s.rows * out / s.depth, weight, s.rows * in, s.q * s.depth);
          gemm(s.rows * out / s.depth, s.rows * in, weight, s.q * s.depth);
        } else {
          gemm(s.rows * out, weight, s.rows * in, s.q);
          gemm(s.rows * out, s.rows * in, weight, s.q);
        }
        break;
      }
      case Split::cube: {
        const double l = s.q;
        const Cube3d o = orientation(role);
        if (!s.keep_gathered) traffic.add(o.c, int(l), "all_gather", s.rows * in, s.e, 1, l * s.rows * in);
        traffic.add(o.b, int(l), "all_gather", s.rows * out, s.e, 1, l * s.rows * out);
        traffic.add("tensor_x", int(l), "broadcast", weight, s.e, l, -1, 1);
        traffic.add("tensor_x", int(l), "reduce", weight, s.e, l, -1, 1);  // dW's blocks to their owners
        traffic.add(o.c, int(l), "reduce_scatter", l * s.rows * in, s.e);
        Act xg = s.keep_gathered ? k[0] : gather(in);
        Act dp = gather(out);
        Act dxg = t.make(l * s.rows * in * s.e), panel = t.make(s.rows * out * s.e);
        {
          Act w = t.make(weight * s.e), dw = t.make(weight * s.e);
          gemm(s.rows * out, weight, l * s.rows * in, l);
          gemm(s.rows * out, l * s.rows * in, weight, l);
        }
        k.clear();
        xg.reset();
        return scatter(in);
      }
    }
    k.clear();
    return dx;
  }
  Act dropout_forward(const Act& x) { return s.dropout ? act(s.width) : x; }
  Act dropout_backward(const Act& dy) { return s.dropout ? act(s.width) : dy; }

  // Elements of this rank's block of a linear's weight [out, in] (full sizes).
  double block(double out, double in) const { return out * in / s.weight_parts; }

  // `messages` sends (and as many receives) of `elements` on the sequence group.
  void ring(double elements, double messages) {
    traffic.add("sequence", s.sequence, "send", elements, s.e, messages);
    traffic.add("sequence", s.sequence, "recv", elements, s.e, messages);
  }

  // --- attention: nn/attention.cpp; the ring (nn/sp/ring_attention.cpp) and Ulysses
  // (nn/sp/ulysses_attention.cpp) in its place under sequence parallelism.
  // Attention's two products over every key, forward; its backward makes the scores again and
  // takes four more. Under a causal mask half the keys, as FlashAttention-2 counts (a ring's
  // blocks in aggregate); the CPU's kernels, at the rate calibrate measures them, compute whole
  // blocks of queries to each block's last key (ops::cpu::causal_work_share).
  double attention_flops() const {
    const bool ring = s.sequence > 1 && !s.ulysses;
    const double causal = s.cpu && !ring ? ops::cpu::causal_work_share(std::int64_t(s.positions * s.sequence)) : 0.5;
    return 4 * s.rows * s.positions * s.sequence * s.attention * (s.causal ? causal : 1.0);
  }
  void attention_time(double flops) {
    // The keys one kernel call runs over: a ring's block of this rank's positions, else all.
    const double keys = s.sequence > 1 && !s.ulysses ? s.positions : s.positions * s.sequence;
    if (costs) attention_seconds += flops / costs->hardware->attention_rate(costs->dtype, keys);
  }
  Act self_attention_forward(const Act& qkv, Keep& k) {
    attention_time(attention_flops());
    const double lse = s.samples * s.heads * s.positions * kStat;
    if (s.sequence > 1 && !s.ulysses) {
      Act q = act(s.attention), kv = act(s.kv);
      Act y = f32(s.attention);
      Act l = t.make(lse), sum = t.make(lse);
      {
        Act b0 = act(s.kv), b1 = s.sequence > 2 ? act(s.kv) : nullptr;  // the blocks in flight
      }
      ring(s.rows * s.kv, s.sequence - 1);  // the keys and values pass around the ring
      k = {qkv, y, l};
      return s.e == 4 ? y : act(s.attention);
    }
    if (s.sequence > 1) {  // Ulysses: positions to heads and back, by all-to-all
      Act send = act(s.qkv), recv = act(s.qkv);
      ring(s.rows * s.qkv / s.sequence, s.sequence - 1);  // an all-to-all: a part to every other rank
      Act heads = act(s.qkv);
      Act y_heads = act(s.attention), l = t.make(lse);
      Act back = act(s.attention), mine = act(s.attention);
      ring(s.rows * s.attention / s.sequence, s.sequence - 1);
      Act y = act(s.attention);
      k = {heads, y_heads, l};
      return y;
    }
    Act y = act(s.attention);
    k = {qkv, y, t.make(lse)};
    if (s.widen) Act y32 = scratch32(s.attention), qkv32 = scratch32(s.qkv);  // ops/cpu/attention.cpp
    return y;
  }
  Act self_attention_backward(Keep& k) {
    attention_time(2.5 * attention_flops());
    if (s.sequence > 1 && !s.ulysses) {
      Act q = act(s.attention), kv = act(s.kv);
      Act dy32 = s.e == 4 ? nullptr : f32(s.attention);
      Act dq = f32(s.attention);
      Act dkv;
      {
        Act b0 = act(s.kv), b1 = s.sequence > 2 ? act(s.kv) : nullptr;
        Act mine = act(s.kv), a0 = act(s.kv), a1 = s.sequence > 2 ? act(s.kv) : nullptr, others = act(s.kv);
        dkv = mine;
      }
      ring(s.rows * s.kv, 2 * (s.sequence - 1));  // the blocks again, and their gradients' shares
      Act dqkv = f32(s.qkv);
      k.clear();
      return s.e == 4 ? dqkv : act(s.qkv);
    }
    if (s.sequence > 1) {
      Act send = act(s.attention), recv = act(s.attention);
      ring(s.rows * s.attention / s.sequence, s.sequence - 1);
      Act dy_heads = act(s.attention);
      Act dqkv_heads = act(s.qkv);
      Act back = act(s.qkv), mine = act(s.qkv);
      ring(s.rows * s.qkv / s.sequence, s.sequence - 1);
      Act dqkv = act(s.qkv);
      k.clear();
      return dqkv;
    }
    Act dqkv = act(s.qkv);
    if (s.widen) Act d32 = scratch32(s.qkv), dy = scratch32(s.attention), qkv = scratch32(s.qkv), y = scratch32(s.attention);
    k.clear();
    return dqkv;
  }

  struct AttentionKeep {
    Keep qkv, attention, proj, self;
  };
  // The ways heads and the MLP split (their widths here are this rank's).
  double parts() const { return s.split == Split::grid || s.split == Split::cube ? s.q : s.split == Split::d1 ? s.tensor : 1; }
  Act attention_forward(const Act& x, AttentionKeep& k) {
    const double C = s.width * s.q;  // the full hidden width
    Act qkv = linear_forward(x, s.width, s.qkv, block(s.qkv * parts(), C), Role::input, k.qkv);
    Act y = self_attention_forward(qkv, k.attention);
    Act out = linear_forward(y, s.attention, s.width, block(C, s.attention * parts()), Role::output, k.proj);
    if (s.selective) {  // forget(qkv): remade from x in backward
      std::replace(k.attention.begin(), k.attention.end(), qkv, Act());
      k.self = {x};
    }
    return out;
  }
  Act attention_backward(AttentionKeep& k) {
    const double C = s.width * s.q;
    if (!k.self.empty()) {  // the qkv projection again, its output put back where it was saved
      Keep again;
      Act qkv = linear_forward(k.self[0], s.width, s.qkv, block(s.qkv * parts(), C), Role::input, again);
      for (Act& a : k.attention)
        if (!a) a = qkv;
      k.qkv = again;
      k.self.clear();
    }
    Act g1 = linear_backward(s.attention, s.width, block(C, s.attention * parts()), Role::output, k.proj);
    Act dqkv = self_attention_backward(k.attention);
    return linear_backward(s.width, s.qkv, block(s.qkv * parts(), C), Role::input, k.qkv);
  }

  // --- nn/mlp.cpp
  struct MlpKeep {
    Keep fc, act, proj, self;
  };
  Act mlp_forward(const Act& x, MlpKeep& k) {
    const double C = s.width * s.q;
    Act h = linear_forward(x, s.width, s.fc, block(s.fc * parts(), C), Role::input, k.fc);
    Act a = act(s.hidden);
    k.act = {h};
    Act y = linear_forward(a, s.hidden, s.width, block(C, s.hidden * parts()), Role::output, k.proj);
    if (s.selective) {
      k.proj[0].reset();
      k.self = {h};
    }
    return y;
  }
  Act mlp_backward(MlpKeep& k) {
    const double C = s.width * s.q;
    if (!k.self.empty()) {
      k.proj[0] = act(s.hidden);
      k.self.clear();
    }
    Act d1 = linear_backward(s.hidden, s.width, block(C, s.hidden * parts()), Role::output, k.proj);
    Act d2 = act(s.fc);
    k.act.clear();
    return linear_backward(s.width, s.fc, block(s.fc * parts(), C), Role::input, k.fc);
  }

  // --- nn/transformer_block.cpp
  struct BlockKeep {
    Keep ln1, ln2;
    AttentionKeep attn;
    MlpKeep mlp;
  };
  Act block_forward(const Act& x, BlockKeep& k) {
    if (s.pre_norm) {
      Act a;
      {
        Act n = norm_forward(x, k.ln1);
        Act o = attention_forward(n, k.attn);
        a = dropout_forward(o);
      }
      Act h = act(s.width);
      Act m;
      {
        Act n = norm_forward(h, k.ln2);
        Act o = mlp_forward(n, k.mlp);
        m = dropout_forward(o);
      }
      return act(s.width);
    }
    Act a;
    {
      Act o = attention_forward(x, k.attn);
      a = dropout_forward(o);
    }
    Act h = norm_forward(act(s.width), k.ln1);
    Act m;
    {
      Act o = mlp_forward(h, k.mlp);
      m = dropout_forward(o);
    }
    return norm_forward(act(s.width), k.ln2);
  }
  Act block_backward(const Act& dy, BlockKeep& k) {
    if (s.pre_norm) {
      Act dm;
      {
        Act d = dropout_backward(dy);
        Act dmlp = mlp_backward(k.mlp);
        dm = norm_backward(k.ln2);
      }
      Act dh = act(s.width);
      Act da;
      {
        Act d = dropout_backward(dh);
        Act dattn = attention_backward(k.attn);
        da = norm_backward(k.ln1);
      }
      return act(s.width);
    }
    Act ds2 = norm_backward(k.ln2);
    Act dh;
    {
      Act d = dropout_backward(ds2);
      Act dmlp = mlp_backward(k.mlp);
      dh = act(s.width);
    }
    Act ds1 = norm_backward(k.ln1);
    Act da;
    {
      Act d = dropout_backward(ds1);
      da = attention_backward(k.attn);
    }
    return act(s.width);
  }

  // --- the first layer: token (and position) embeddings, models/*.cpp; split by vocabulary in 1D
  // (nn/tp/embedding.cpp), by vocabulary and features on a grid (nn/tp/layers_grid.cpp).
  Act embedding_forward(Keep& k) {
    Act y;
    {
      Act lookup;
      if (s.split == Split::d1) {  // localized ids (kept), the partial lookup summed in place
        k.push_back(t.make(s.rows * 4));
        lookup = act(s.width);
        tensor_all_reduce(s.rows * s.width, s.e);
      } else if (s.split == Split::grid) {  // every sample of the depth layer, reduce-scattered down the column
        k.push_back(t.make(s.rows * s.q * 4));
        Act partial = t.make(s.rows * s.q * s.width * s.e);
        lookup = act(s.width);
        traffic.add("tensor_col", int(s.q), "reduce_scatter", s.rows * s.q * s.width, s.e);
      } else if (s.split == Split::cube) {  // every sample's ids, reduce-scattered over x, then z
        const double l = s.q;
        k.push_back(t.make(s.rows * l * l * 4));
        Act partial = t.make(s.rows * l * l * s.width * s.e);
        Act over_x = t.make(s.rows * l * s.width * s.e);
        lookup = act(s.width);
        traffic.add("tensor_x", int(l), "reduce_scatter", s.rows * l * l * s.width, s.e);
        traffic.add("tensor_z", int(l), "reduce_scatter", s.rows * l * s.width, s.e);
      } else {
        lookup = act(s.width);
      }
      if (s.anatomy.embedding == models::Anatomy::Embedding::positions_added) {
        y = act(s.width);  // the positions added to a copy
      } else if (s.anatomy.embedding == models::Anatomy::Embedding::positions_types_norm) {
        Act types = act(s.width);  // the token types' lookup, added in place
        types.reset();
        Act positioned = act(s.width);
        Keep ln;
        y = norm_forward(positioned, ln);
        k.insert(k.end(), ln.begin(), ln.end());
      } else {
        y = lookup;
      }
    }
    return dropout_forward(y);
  }
  void embedding_backward(const Act& dy, Keep& k, Act& table_grad) {
    Act d = dropout_backward(dy);
    // The learned position table's gradient (s.positions_table: a token model's; a classifier's
    // patch positions are left out, a table of patches + 1 rows).
    const bool positions =
        s.anatomy.embedding != models::Anatomy::Embedding::tokens && s.anatomy.head != models::Anatomy::Head::classifier;
    Act position_grad = positions ? grads(s.positions_table) : nullptr;
    if (s.anatomy.embedding == models::Anatomy::Embedding::positions_types_norm) {
      Act dx = act(s.width);
    }
    if (!table_grad) table_grad = grads(s.table);
    if (s.split == Split::grid) {  // the gradient all-gathered down the column
      traffic.add("tensor_col", int(s.q), "all_gather", s.rows * s.width, s.e, 1, s.rows * s.q * s.width);
      Act gathered = t.make(s.rows * s.q * s.width * s.e);
      if (s.cpu && s.e != 4) Act acc = t.make(s.table * 4);
    } else if (s.split == Split::cube) {  // over z, then x: every sample's rows
      const double l = s.q;
      traffic.add("tensor_z", int(l), "all_gather", s.rows * s.width, s.e, 1, l * s.rows * s.width);
      traffic.add("tensor_x", int(l), "all_gather", l * s.rows * s.width, s.e, 1, l * l * s.rows * s.width);
      Act over_z = t.make(s.rows * l * s.width * s.e), over_x = t.make(s.rows * l * l * s.width * s.e);
      if (s.cpu && s.e != 4) Act acc = t.make(s.table * 4);
    } else if (s.cpu && s.e != 4) {
      Act acc = t.make(s.table * 4);  // the lookup's gradient summed in fp32
    }
    table_grad.reset();
    k.clear();
  }

  // --- the last layers: final norm, head (tied: the table as the weight) and loss
  // (nn/cross_entropy_loss.cpp; split over the vocabulary: nn/tp/cross_entropy.cpp).
  struct HeadKeep {
    Keep norm, head, loss, bert;
  };
  // A block of rows' sums (nn/loss.h's add_rows): over the vocabulary's ranks when it is split.
  void loss_rows(double rows) {
    if (s.split == Split::d1) traffic.add("tensor", int(s.tensor), "all_reduce", rows, kStat, 3);
    if (s.split == Split::grid) traffic.add("tensor_row", int(s.q), "all_reduce", rows, kStat, 3);
    if (s.split == Split::cube) traffic.add("tensor_z", int(s.q), "all_reduce", rows, kStat, 3);
  }
  // The loss's sum and count over the ranks holding other rows of the same samples (over_replica).
  void replica_mean() {
    if (s.sequence > 1) traffic.add("sequence", s.sequence, "all_reduce", 2, 4);
    if (s.split == Split::grid) {
      traffic.add("tensor_col", int(s.q), "all_reduce", 2, 4);
      traffic.add("tensor_depth", int(s.depth), "all_reduce", 2, 4);
    }
    if (s.split == Split::cube) {
      traffic.add("tensor_x", int(s.q), "all_reduce", 2, 4);
      traffic.add("tensor_y", int(s.q), "all_reduce", 2, 4);
    }
  }
  Act loss_forward(double rows, double classes, double element, HeadKeep& k, const Act& logits) {
    loss_rows(rows);
    replica_mean();
    if (s.split == Split::none) {
      Act losses = t.make(rows * kStat);
      k.loss = {logits, t.make(rows * kStat)};
      return t.make(4);
    }
    Act targets = t.make(rows * 4);
    Act losses = t.make(rows * kStat), lse = t.make(rows * kStat);
    if (s.vocab_real < classes) Act real = t.make(rows * s.vocab_real * element);
    Act m = t.make(rows * kStat), sum = t.make(rows * kStat), target = t.make(rows * kStat);
    k.loss = {logits, lse, targets};
    return t.make(4);
  }
  Act head_forward(const Act& x, HeadKeep& k) {
    Act n = norm_forward(x, k.norm);
    const bool vit = s.anatomy.head == models::Anatomy::Head::classifier;
    const double rows = vit ? s.samples : s.rows;
    const double element = vit ? 4 : s.e;
    if (s.loss_chunks > 1) {  // nn/chunked_loss.cpp: one block of logits at a time
      k.head = {n};
      const double part = rows / s.loss_chunks;
      Act logits = t.make(part * s.vocab * element);
      gemm(part * s.width, s.table, part * s.vocab);
      Act stats = t.make(2 * part * kStat);
      for (int b = 0; b < s.loss_chunks; ++b) loss_rows(part);
      replica_mean();
      return t.make(4);
    }
    if (s.anatomy.head == models::Anatomy::Head::masked_lm) {  // dense, GELU and LayerNorm before the decoder
      Keep d;
      Act h = linear_forward(n, s.width, s.width, 0, Role::input, d);
      Act g = act(s.width);
      n = norm_forward(g, k.bert);
      k.bert.insert(k.bert.end(), {h, g});
    }
    Act logits;
    if (s.split == Split::grid || s.split == Split::cube) {
      logits = linear_forward(n, s.width, s.vocab, s.table, Role::input, k.head, true);
    } else {
      k.head = {n};
      logits = t.make(rows * s.vocab * element);
      if (!vit) gemm(rows * s.width, s.table, rows * s.vocab);
    }
    return loss_forward(rows, s.vocab, element, k, logits);
  }
  // `table_grad`: where a table shared with the embedding keeps its gradient until the embedding's
  // backward adds its part.
  Act head_backward(HeadKeep& k, Act& table_grad) {
    const bool vit = s.anatomy.head == models::Anatomy::Head::classifier;
    const double rows = vit ? s.samples : s.rows;
    const double element = vit ? 4 : s.e;
    if (!vit && s.tied) table_grad = grads(s.table);
    const Act own = !vit && !s.tied ? grads(s.table) : nullptr;
    if (s.loss_chunks > 1) {
      const double part = rows / s.loss_chunks;
      Act dx = act(s.width);
      {
        Act logits = t.make(part * s.vocab * element);
        gemm(part * s.width, s.table, part * s.vocab);
        Act stats = t.make(part * kStat);
        Act dpart = t.make(part * s.width * s.e);
        gemm(part * s.vocab, s.table, part * s.width);
        gemm(part * s.vocab, part * s.width, s.table);
      }
      for (int b = 0; b < s.loss_chunks; ++b) {
        loss_rows(part);
        if (s.split == Split::d1) tensor_all_reduce(part * s.width, s.e);  // each block's head input gradient
      }
      k.head.clear();
      k.loss.clear();
      return norm_backward(k.norm);
    }
    // The logits' gradient is written over them, unless padding classes need a buffer of their own.
    Act dlogits = k.loss[0];
    if (s.split != Split::none && s.vocab_real < s.vocab) {
      dlogits = t.make(rows * s.vocab * element);
      Act real = t.make(rows * s.vocab_real * element), copy = t.make(rows * s.vocab_real * element);
    }
    k.loss.clear();
    Act dx;
    if (s.split == Split::grid || s.split == Split::cube) {
      dx = linear_backward(s.width, s.vocab, s.table, Role::input, k.head, !s.tied, true);
    } else {
      dx = act(s.width);
      if (!vit) {
        gemm(rows * s.vocab, s.table, rows * s.width);
        gemm(rows * s.vocab, rows * s.width, s.table);
      }
      k.head.clear();
      if (s.split == Split::d1) {
        dx = act(s.width);  // CopyToGroup's all-reduced copy
        tensor_all_reduce(s.rows * s.width, s.e);
      }
    }
    dlogits.reset();
    if (s.anatomy.head == models::Anatomy::Head::masked_lm) {
      Act a = norm_backward(k.bert), b = act(s.width);
      dx = act(s.width);
      k.bert.clear();
    }
    return norm_backward(k.norm);
  }
};

// A stage's layers for one micro-batch: forward leaves what backward reads.
struct MicroBatchKeep {
  Act table_grad;  // a tied table's gradient, from the head's backward to the embedding's
  std::vector<Replay::BlockKeep> blocks;
  std::vector<Act> unit_inputs;  // a checkpointed run keeps its input alone
  Keep embedding;
  Replay::HeadKeep head;
};

Sizes sizes_of(const config::Config& cfg, const parallel::Layout& layout, const DeviceOps& ops) {
  const config::ModelConfig& m = cfg.model;
  const parallel::MeshSpec& spec = layout.spec();
  const int side = layout.tensor_side();
  const bool grid = spec.tensor > 1 && spec.mode != parallel::TensorMode::d1;
  const double parts = grid ? side : spec.tensor;  // heads, the MLP and the vocabulary split this many ways
  const std::int64_t local = cfg.train.batch_size / spec.data;
  const std::int64_t micro = cfg.train.micro_batch_size ? cfg.train.micro_batch_size : local;
  Sizes s;
  s.split = spec.tensor == 1                        ? Split::none
            : spec.mode == parallel::TensorMode::d3 ? Split::cube
            : grid                                   ? Split::grid
                                                     : Split::d1;
  s.anatomy = models::find_family(m.type).anatomy;
  const bool vit = s.anatomy.head == models::Anatomy::Head::classifier;
  const double T = double(models::positions_per_sample(m));
  s.samples = double(micro) / layout.sample_parts();
  s.positions = T / spec.sequence;
  s.rows = s.samples * s.positions;
  s.sequence = spec.sequence;
  s.ulysses = spec.sequence_mode == parallel::SequenceMode::ulysses;
  const double C = double(m.n_embd), H = m.n_head, Hkv = m.n_kv_head ? m.n_kv_head : m.n_head, hd = C / H;
  s.q = grid ? side : 1;
  s.depth = spec.mode == parallel::TensorMode::d2p5 ? spec.depth : 1;
  s.sliced = grid && s.depth > 1 && !cfg.parallel.tensor.keep_gathered;
  s.width = C / s.q;
  s.heads = H / parts;
  s.qkv = (H + 2 * Hkv) * hd / parts;
  s.kv = 2 * Hkv * hd / parts;
  s.attention = H * hd / parts;
  s.glu = s.anatomy.swiglu;
  s.hidden = double(s.anatomy.mlp_width(m)) / parts;
  s.fc = (s.glu ? 2 : 1) * s.hidden;
  const double classes = vit ? double(m.num_classes) : double(m.vocab_size);
  // A split vocabulary is padded to a multiple of the parts (nn/tp/embedding.h's padded_vocab): the
  // table's row blocks, l^2 of them in 3D.
  const double blocks = s.split == Split::cube ? parts * parts : parts;
  const double padded = s.split == Split::none || vit ? classes : std::ceil(classes / blocks) * blocks;
  s.vocab = padded / parts;
  s.vocab_real = s.vocab;  // replay_step takes the rank's block
  s.e = double(dtype_size(cfg.train.precision));
  s.rms = s.anatomy.rms_norm;
  s.norm_stats = s.rms ? 1 : 2;
  s.pre_norm = s.anatomy.pre_norm;
  s.causal = s.anatomy.causal;
  s.dropout = m.dropout > 0;
  s.selective = cfg.train.activation_checkpointing == config::Recompute::selective;
  s.loss_chunks = cfg.train.loss_chunks;
  s.offload_checkpoints = cfg.train.activation_offload == config::ActivationOffload::host;
  s.tensor = spec.tensor;
  s.weight_parts = s.split == Split::grid   ? s.q * s.q * (s.sliced ? s.depth : 1)
                   : s.split == Split::cube ? s.q * s.q * s.q
                                            : spec.tensor;
  s.keep_gathered = cfg.parallel.tensor.keep_gathered;
  // The vocabulary's rows this rank holds, its features (3D: a row block of l^2).
  s.table = (s.split == Split::cube ? s.vocab / s.q : s.vocab) * s.width;
  s.positions_table = double(m.max_positions ? m.max_positions : m.seq_len) * s.width;
  // As engine/model_data.cpp picks its keeper: the chunks hand modules their gradients.
  s.module_grads = config::keeps_chunks(cfg);
  s.cpu = ops.cpu;
  s.widen = ops.cpu && cfg.train.precision != DType::f32 && !(cfg.train.precision == DType::bf16 && ops.bf16_native);
  return s;
}

}  // namespace

std::vector<StageLayers> stage_layers(const config::Config& cfg, const PlannedRank& rank) {
  const models::Model& model = *rank.model;
  const pipeline::PipelineEngine& engine = *rank.engine;
  const int stages = rank.pc->layout().spec().pipeline, stage = rank.pc->coordinates().pipeline;
  std::vector<StageLayers> out;
  for (int c = 0; c < engine.chunks(); ++c) {
    const int vs = c * stages + stage;
    const int begin = engine.bounds()[std::size_t(vs)], end = engine.bounds()[std::size_t(vs + 1)];
    StageLayers l;
    l.embedding = begin < model.first_block_layer();
    l.head = end > model.end_block_layer();
    l.checkpoint_every = config::checkpoint_policy(cfg.train).every;
    for (int i = std::max(begin, model.first_block_layer()); i < std::min(end, model.end_block_layer()); ++i)
      l.blocks += model.blocks_in_layer()[std::size_t(i - model.first_block_layer())];
    out.push_back(l);
  }
  return out;
}

namespace {

// What the trainer and the model data keeper communicate once a step, beside the layers
// (engine/trainer.cpp, engine/model_data.cpp, memory/chunk_manager.cpp, pipeline/engine.cpp).
// The part that runs beside backward: its seconds, the share of them that starts only after
// backward's last op, and the backwards it is spread over (StepReplay::overlappable,
// overlap_tail, overlap_passes).
struct Overlap {
  double seconds = 0, tail = 0;
  int passes = 1;
};

// The groups a rank's step-level collectives run over.
struct StepGroups {
  int data, pipeline, tensor;
  parallel::GroupKind chunk_kind;  // the model data's: data, or data x sequence
  int group;                       // its size
  std::string chunk_group;         // its name
};

StepGroups step_groups(const PlannedRank& rank) {
  const parallel::ParallelContext& pc = *rank.pc;
  const parallel::Layout& layout = pc.layout();
  const auto size = [&](parallel::GroupKind kind) { return int(layout.group(kind, pc.rank()).size()); };
  const parallel::GroupKind chunk_kind =
      layout.spec().sequence > 1 ? parallel::GroupKind::data_sequence : parallel::GroupKind::data;
  return {.data = layout.spec().data,
          .pipeline = size(parallel::GroupKind::pipeline),
          .tensor = size(parallel::GroupKind::tensor),
          .chunk_kind = chunk_kind,
          .group = size(chunk_kind),
          .chunk_group = std::string(parallel::group_name(chunk_kind))};
}

// The fp32 tensor keeper's: the bucketed all-reduce (distributed/gradient_reducer.h: parameters in
// reverse order, a bucket closed once it holds parallel.bucket_mb), a grid's replicated blocks
// and a table tied at the pipeline's ends, then the gradient norm's sums.
Overlap tensor_keeper_collectives(const config::Config& cfg, const PlannedRank& rank, const StepGroups& g,
                                  Traffic& traffic) {
  const parallel::Layout& layout = rank.pc->layout();
  double buckets = 0, last = 0;  // seconds: every bucket's, the last one's
  if (g.group > 1) {
    const double start = traffic.seconds();
    const double bucket_bytes = std::floor(cfg.parallel.bucket_mb * 1024 * 1024);
    const std::vector<nn::Parameter*>& params = rank.engine->parameters();
    double bytes = 0, elements = 0;
    bool open = false;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      if (open && bytes >= bucket_bytes) {
        traffic.add(g.chunk_group, g.group, "all_reduce", elements, 4);
        bytes = elements = 0;
      }
      open = true;
      elements += double((*it)->shape.numel());
      bytes += 4 * double((*it)->shape.numel());
    }
    const double before_last = traffic.seconds();
    if (open) traffic.add(g.chunk_group, g.group, "all_reduce", elements, 4);
    buckets = traffic.seconds() - start;
    last = traffic.seconds() - before_last;
  }
  // A grid's replicated blocks (nn/tp/shard.h's reduce_replicated_gradients): one flat all-reduce
  // per level and group.
  std::map<std::pair<std::size_t, std::string>, std::pair<int, double>> replicated;
  for (const nn::Parameter* p : rank.engine->parameters())
    for (std::size_t level = 0; level < p->replicas.size(); ++level)
      if (p->replicas[level]->size() > 1) {
        auto& [n, elements] = replicated[{level, p->replicas[level]->name()}];
        n = p->replicas[level]->size();
        elements += double(p->shape.numel());
      }
  for (const auto& [key, figures] : replicated) traffic.add(key.second, figures.first, "all_reduce", figures.second, 4);
  const int ends = int(layout.group(parallel::GroupKind::pipeline_ends, rank.pc->rank()).size());
  for (const nn::Parameter* p : rank.engine->parameters())  // tied at the pipeline's ends
    if (layout.spec().pipeline > 1 && rank.engine->tied(*p))
      traffic.add("pipeline_ends", ends, "all_reduce", double(p->shape.numel()), 4);
  traffic.add("tensor", g.tensor, "all_reduce", 1, 4);  // the gradient norm's sum
  traffic.add("pipeline", g.pipeline, "all_reduce", 1, 4);
  // The last bucket (the first parameters') is complete only when backward is: it starts after.
  return {.seconds = buckets, .tail = buckets > 0 ? last / buckets : 0.0};
}

// The chunk keeper's group sums and gathers (memory/chunk_manager.h).
Overlap chunk_group_collectives(const config::Config& cfg, const PlannedRank& rank, const StepGroups& g,
                                int micro_batches, Traffic& traffic) {
  const memory::ChunkLayout& chunks = *rank.chunk_layout;
  const double C = double(chunks.chunk_elements), e = double(dtype_size(cfg.train.precision));
  const int groups = chunks.chunks / chunks.group_size, stage = cfg.zero.stage, group = g.group;
  const bool accumulate = micro_batches > 1;
  const bool offload = cfg.memory.offload != config::Offload::none;
  Overlap overlap;
  // Each chunk group's gradients summed once it is complete (every micro-batch's at stages 2 and 3
  // or under offload): all of them at stage 0, each rank's own chunk when sharded - under offload
  // by a ring of sends straight between the chunks' payloads. At stages 0 and 1 with chunks that
  // stay put, each rank sums its micro-batches in a grad list of every chunk, whose groups are
  // reduced in fp32 once, beside the last micro-batch's backward.
  const bool local_sums = memory::sums_micro_batches_locally(config::chunk_options(cfg, accumulate));
  const double reductions = double(groups) * (accumulate && !local_sums ? micro_batches : 1);
  const bool ring = offload && stage > 0;
  const double start = traffic.seconds();
  if (ring) {
    traffic.add(g.chunk_group, group, "send", C, e, reductions * (group - 1));
    traffic.add(g.chunk_group, group, "recv", C, e, reductions * (group - 1));
  } else if (local_sums) {  // fp32, once a step
    traffic.add(g.chunk_group, group, stage > 0 ? "reduce_scatter" : "all_reduce", group * C, 4, reductions);
  } else {
    traffic.add(g.chunk_group, group, stage > 0 ? "reduce_scatter" : "all_reduce", group * C, e, reductions);
  }
  // Without offload each group's sum runs beside the backward of the groups after it
  // (memory/chunk_manager.h: one in flight); the last group's, after backward (with micro-batches
  // at stages 2 and 3, after each micro-batch's).
  if (!offload && groups > 0)
    overlap = {.seconds = traffic.seconds() - start,
               .tail = 1.0 / groups,
               .passes = accumulate && !local_sums ? micro_batches : 1};
  // The chunks other ranks updated, gathered: after the step (stages 1, 2), or for each forward and
  // backward (stage 3).
  const double gathers = stage == 1 || stage == 2 ? groups
                         : stage == 3            ? double(2 * groups) * micro_batches
                                                 : 0.0;
  if (ring) {
    traffic.add(g.chunk_group, group, "send", C, e, gathers * (group - 1));
    traffic.add(g.chunk_group, group, "recv", C, e, gathers * (group - 1));
  } else {
    traffic.add(g.chunk_group, group, "all_gather", C, e, gathers, group * C);
  }
  return overlap;
}

// The chunk keeper's segments other ranks hold too (a tied table at the pipeline's ends, a grid's
// replicas): their owned gradient chunks, one all-reduce per chunk, level by level. The first
// level's start as each group's sum is the step's, beside the rest of backward (not under
// offload): they join `overlap`, whose tail is still the last group's share.
void chunk_replica_collectives(const config::Config& cfg, const PlannedRank& rank, const StepGroups& g,
                               bool accumulate, Traffic& traffic, Overlap& overlap) {
  const memory::ChunkLayout& chunks = *rank.chunk_layout;
  const double C = double(chunks.chunk_elements), e = double(dtype_size(cfg.train.precision));
  const int groups = chunks.chunks / chunks.group_size, stage = cfg.zero.stage;
  const bool offload = cfg.memory.offload != config::Offload::none;
  const int index = rank.pc->layout().group_index(g.chunk_kind, rank.pc->rank());
  std::map<std::pair<std::size_t, std::string>, std::pair<int, double>> replicas;  // (level, group) -> (size, chunks)
  for (std::size_t seg = 0; seg < rank.chunk_params.segments.size(); ++seg) {
    const std::vector<comm::Communicator*>& levels = rank.chunk_params.segments[seg].replicas;
    for (std::size_t level = 0; level < levels.size(); ++level) {
      if (levels[level]->size() == 1) continue;
      double owned = 0;
      for (int c = chunks.segment_chunks[seg]; c < chunks.segment_chunks[seg + 1]; ++c)
        if (stage == 0 || g.group == 1 || c % chunks.group_size == index) ++owned;
      auto& [n, count] = replicas[{level, levels[level]->name()}];
      n = levels[level]->size();
      count += owned;
    }
  }
  for (const auto& [key, figures] : replicas) {
    if (figures.second == 0) continue;
    const double start = traffic.seconds();
    traffic.add(key.second, figures.first, "all_reduce", C, accumulate ? 4 : e, figures.second);
    if (key.first == 0 && !offload && groups > 0)
      overlap = {.seconds = overlap.seconds + traffic.seconds() - start, .tail = 1.0 / groups};
  }
}

Overlap step_collectives(const config::Config& cfg, const PlannedRank& rank, int micro_batches, Traffic& traffic) {
  const StepGroups g = step_groups(rank);
  traffic.add("pipeline", g.pipeline, "all_reduce", 1, 4);  // the pipeline's loss
  if (g.data > 1) traffic.add("data", g.data, "all_reduce", 1, 4, 2);  // the step's targets and loss over replicas
  if (!rank.model_data.chunks) return tensor_keeper_collectives(cfg, rank, g, traffic);
  Overlap overlap;
  if (g.group > 1) overlap = chunk_group_collectives(cfg, rank, g, micro_batches, traffic);
  chunk_replica_collectives(cfg, rank, g, micro_batches > 1, traffic, overlap);
  if (cfg.zero.stage > 0 && g.group > 1) traffic.add(g.chunk_group, g.group, "all_reduce", 1, 4);  // the gradient norm
  if (g.tensor > 1) traffic.add("tensor", g.tensor, "all_reduce", 1, 4);
  if (g.pipeline > 1) traffic.add("pipeline", g.pipeline, "all_reduce", 1, 4);
  return overlap;
}

}  // namespace

namespace {

// One rank's step replayed: its pipeline schedule's actions in order, each stage's layers forward
// and backward through the activation pool (Tally), the stages' messages, then what the step
// adds after the actions.
class StepRun {
 public:
  StepRun(const config::Config& cfg, const PlannedRank& planned, const DeviceOps& ops, const Costs* costs)
      : cfg_(cfg),
        planned_(planned),
        costs_(costs),
        layout_(planned.pc->layout()),
        stages_(stage_layers(cfg, planned)),
        s_(sizes_of(cfg, layout_, ops)),
        r_{tally_, s_, out_.traffic, costs},
        pipeline_(layout_.spec().pipeline),
        stage_(layout_.coordinates(planned.pc->rank()).pipeline),
        last_(pipeline_ * int(stages_.size()) - 1) {
    if (costs) out_.traffic = Traffic(costs->link);
    if (costs) tally_.rate = {.hardware = costs->hardware, .dtype = costs->dtype, .element = s_.e};
    // A table used by the embedding and the head on this rank (a tied head in one stage).
    bool embedding = false, head = false;
    for (const StageLayers& l : stages_) {
      embedding = embedding || l.embedding;
      head = head || l.head;
    }
    const bool classifier = s_.anatomy.head == models::Anatomy::Head::classifier;
    s_.tied = embedding && head && cfg.model.tie_embeddings && !classifier;
    // This rank's block of the padded vocabulary (the loss group's index: 1D's tensor rank, the
    // grid's column j, 3D's z) and the real classes in it.
    if (s_.split != Split::none && !classifier) {
      const parallel::Coordinates c = layout_.coordinates(planned.pc->rank());
      const double block = s_.split == Split::d1 ? c.tensor : s_.split == Split::grid ? c.col : c.depth;
      s_.vocab_real = std::clamp(double(cfg.model.vocab_size) - block * s_.vocab, 0.0, s_.vocab);
    }
    const bool scatter_gather = cfg.parallel.scatter_gather && s_.split == Split::d1 && pipeline_ > 1;
    payload_ = scatter_gather ? s_.width / double(layout_.spec().tensor) : s_.width;
  }

  StepReplay run() {
    const std::int64_t local = cfg_.train.batch_size / layout_.spec().data;
    const int micro_batches = int(local / (cfg_.train.micro_batch_size ? cfg_.train.micro_batch_size : local));
    const std::vector<pipeline::Action> actions =
        pipeline::schedule(cfg_.parallel.schedule, pipeline_, stage_, micro_batches, int(stages_.size()));
    for (std::size_t i = 0; i < actions.size(); ++i)
      run_action(actions[i], i + 1 < actions.size() ? &actions[i + 1] : nullptr);
    out_.peak_bytes = tally_.peak;
    lap();
    after_actions(micro_batches);
    return std::move(out_);
  }

 private:
  // The seconds since the last mark: GEMMs, attention, the tensors made, the layers' collectives
  // (those alone: lap_comm_).
  struct Mark {
    double gemm = 0, attention = 0, made = 0, comm = 0;
  };
  using Stream = std::pair<int, bool>;  // (virtual stage, backward) of a message's receiver

  Mark now() const { return {r_.gemm_seconds, r_.attention_seconds, tally_.made_seconds, out_.traffic.seconds()}; }
  double lap() {
    lap_comm_ = 0;
    if (!costs_) return 0.0;
    const double gemm = r_.gemm_seconds - mark_.gemm, attention = r_.attention_seconds - mark_.attention;
    const double memory = tally_.made_seconds - mark_.made;
    const double comm = out_.traffic.seconds() - mark_.comm;
    out_.gemm_seconds += gemm;
    out_.attention_seconds += attention;
    out_.memory_seconds += memory;
    out_.layer_comm_seconds += comm;
    lap_comm_ = comm;
    mark_ = now();
    return gemm + attention + memory + comm;
  }

  Act forward(const StageLayers& l, MicroBatchKeep& k, Act x) {
    if (l.embedding) x = r_.embedding_forward(k.embedding);
    k.blocks.resize(std::size_t(l.blocks));
    for (int b = 0; b < l.blocks; ++b) {
      if (l.checkpoint_every > 0 && b % l.checkpoint_every == 0)
        k.unit_inputs.push_back(s_.offload_checkpoints ? Act() : x);  // a host copy: not the pool's
      x = r_.block_forward(x, k.blocks[std::size_t(b)]);
      if (l.checkpoint_every > 0 && ((b + 1) % l.checkpoint_every == 0 || b + 1 == l.blocks)) {
        const int first = b / l.checkpoint_every * l.checkpoint_every;
        for (int j = first; j <= b; ++j) k.blocks[std::size_t(j)] = {};
      }
    }
    if (l.head) x = r_.head_forward(x, k.head);
    return x;
  }

  Act backward(const StageLayers& l, MicroBatchKeep& k, Act dy) {
    if (l.head) dy = r_.head_backward(k.head, k.table_grad);
    for (int b = l.blocks; b-- > 0;) {
      if (l.checkpoint_every > 0 && (b + 1 == l.blocks || (b + 1) % l.checkpoint_every == 0)) {
        // The run's blocks forward again from the kept input (brought back from the host if offloaded).
        const int first = b / l.checkpoint_every * l.checkpoint_every;
        Act x = k.unit_inputs.back() ? k.unit_inputs.back() : r_.act(s_.width);
        k.unit_inputs.pop_back();
        for (int j = first; j <= b; ++j) x = r_.block_forward(x, k.blocks[std::size_t(j)]);
      }
      dy = r_.block_backward(dy, k.blocks[std::size_t(b)]);
    }
    if (l.embedding) {
      r_.embedding_backward(dy, k.embedding, k.table_grad);
      dy = nullptr;
    }
    return dy;
  }

  // pipeline/engine.cpp: a received input is a buffer posted ahead (once its stream's shape is
  // known, from the first message), all-gathered over the tensor group when 1D sends 1/t of it;
  // sends complete as the peer has its receive posted, so they hold nothing here.
  std::optional<Stream> input_of(const pipeline::Action& a) const {
    const int vs = a.chunk * pipeline_ + stage_;
    if (a.kind == pipeline::Action::forward) return vs == 0 ? std::nullopt : std::optional(Stream{vs, false});
    return vs == last_ ? std::nullopt : std::optional(Stream{vs, true});
  }
  // Each stream's first message in a step is preceded by a header (pipeline/engine.cpp's kHeader).
  static constexpr double kHeader = 9;
  void send(Stream stream) {
    if (!sent_[stream]) out_.traffic.add("pipeline", pipeline_, "send", kHeader, 4);
    sent_[stream] = true;
    out_.traffic.add("pipeline", pipeline_, "send", s_.rows * payload_, s_.e);
  }
  Act receive(Stream stream) {
    Act buffer;
    if (auto it = posted_.find(stream); it != posted_.end()) {
      buffer = it->second;
      posted_.erase(it);
    } else {
      buffer = r_.act(payload_);
    }
    if (!known_[stream]) out_.traffic.add("pipeline", pipeline_, "recv", kHeader, 4);
    known_[stream] = true;
    out_.traffic.add("pipeline", pipeline_, "recv", s_.rows * payload_, s_.e);
    if (payload_ == s_.width) return buffer;
    out_.traffic.add("tensor", int(s_.tensor), "all_gather", s_.rows * payload_, s_.e, 1, s_.rows * s_.width);
    return r_.act(s_.width);
  }

  // One action of the schedule: its input received, the next action's receive posted, its
  // stage's layers run, its output sent.
  void run_action(const pipeline::Action& a, const pipeline::Action* next_action) {
    const int vs = a.chunk * pipeline_ + stage_;
    const StageLayers& l = stages_[std::size_t(a.chunk)];
    lap();  // receives and sends are the schedule's waits, not the action's work
    Act input;
    if (const auto stream = input_of(a)) input = receive(*stream);
    if (next_action)
      if (const auto next = input_of(*next_action); next && known_.count(*next) && !posted_.count(*next))
        posted_[*next] = r_.act(payload_);
    mark_ = now();
    if (a.kind == pipeline::Action::forward) {
      MicroBatchKeep& k = live_[{a.micro_batch, a.chunk}];
      const double before = tally_.current;
      Act y = forward(l, k, input);
      const double seconds = lap();
      out_.actions.push_back(
          {.forward = true, .micro_batch = a.micro_batch, .chunk = a.chunk, .seconds = seconds, .comm = lap_comm_});
      if (vs != last_) send({vs + 1, false});
      input.reset();
      y.reset();
      out_.kept_per_micro_batch = std::max(out_.kept_per_micro_batch, tally_.current - before);
    } else {
      auto it = live_.find({a.micro_batch, a.chunk});
      Act dx = backward(l, it->second, input);
      const double seconds = lap();
      out_.actions.push_back(
          {.forward = false, .micro_batch = a.micro_batch, .chunk = a.chunk, .seconds = seconds, .comm = lap_comm_});
      if (vs > 0) send({vs - 1, true});
      input.reset();
      live_.erase(it);
    }
  }

  // The step's collectives beside the layers, and with costs the optimizer's pass: the gradient
  // norm's read of this rank's share of the gradients (4 bytes a parameter), then AdamW's over it
  // (the fp32 parameters or master copy, gradient and two moments read, three written back; the
  // chunks' compute-precision copy written too). Clipping folds into the update.
  void after_actions(int micro_batches) {
    const double before = out_.traffic.seconds();
    const Overlap overlap = step_collectives(cfg_, planned_, micro_batches, out_.traffic);
    out_.overlappable = overlap.seconds;
    out_.overlap_tail = overlap.tail;
    out_.overlap_passes = overlap.passes;
    out_.after_actions = out_.traffic.seconds() - before - out_.overlappable;
    if (!costs_) return;
    const ModelDataBytes& md = planned_.model_data;
    const double owned = md.chunks ? double(md.owned_chunks) * double(md.chunk_elements) : double(md.parameters);
    out_.optimizer = owned * (4 + 28 + (md.chunks ? double(dtype_size(cfg_.train.precision)) : 0.0)) /
                     costs_->hardware->optimizer_bandwidth;
  }

  const config::Config& cfg_;
  const PlannedRank& planned_;
  const Costs* costs_;
  const parallel::Layout& layout_;
  const std::vector<StageLayers> stages_;
  Sizes s_;
  StepReplay out_;
  Tally tally_;
  Replay r_;  // after what it refers to
  Mark mark_;
  double lap_comm_ = 0;
  const int pipeline_, stage_, last_;  // stages, this rank's, the last virtual stage
  double payload_ = 0;                 // a message's width (1D's scatter-gather: 1/t of the hidden state)
  std::map<std::pair<int, int>, MicroBatchKeep> live_;  // (micro-batch, chunk) -> what its backward reads
  std::map<Stream, bool> known_, sent_;
  std::map<Stream, Act> posted_;
};

}  // namespace

StepReplay replay_step(const config::Config& cfg, const PlannedRank& planned, const DeviceOps& ops,
                       const Costs* costs) {
  return StepRun(cfg, planned, ops, costs).run();
}

}  // namespace tidal::sim
