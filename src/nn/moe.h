// A mixture of experts in place of a transformer block's MLP (Shazeer et al. 2017; Mixtral,
// Jiang et al. 2024; Qwen2-MoE): a router (nn/router.h) sends each token to its k experts, SwiGLU
// MLPs of their own, and sums their outputs by the router's weights; Qwen2-MoE adds a shared
// expert every token passes through, scaled by a sigmoid gate. Dropless by default: an expert's
// batch is every token routed to it, of any size (a GEMM per expert on its rows; every expert
// runs every micro-batch, with no rows if none came, so the memory manager's and data
// parallelism's hooks see the same modules on every rank).
//
// The router's two losses are added inside the layer: their value, times the micro-batch's
// weight (StepState::loss_weight), goes to the step's ExpertRecord, and their gradient (times
// loss_weight x gradient_scale) joins the router's in backward. Each is the mean over the model's
// MoE layers of the layer's loss (transformers' load_balancing_loss_func over one layer's
// logits) times its coefficient.
//
// On the host, with two experts or more a thread, the experts run at once, each whole on one
// thread (Runner::forward_concurrently): one parallel region a pass in place of each small
// product's and activation's own, whose joins cost more than the products at a small expert's
// batch. Not where the experts' linears are split over tensor ranks (they talk to them), nor
// under a memory budget (there the memory manager holds one expert's weights at a time).
//
// Expert parallelism (an expert group of G ranks, parallel.expert; Lepikhin et al. 2021, GShard):
// each rank holds experts [g E/G, (g+1) E/G) of the group's index g and routes its own tokens
// over all E; an all-to-all sends each expert's rows to its rank (their counts first), which runs
// each of its experts on the rows of every rank in rank order (padded where they meet), and a
// second all-to-all brings the outputs back; backward retraces both. The ranks' orders are fixed,
// so a run is deterministic.
//
// Parameters: gate.weight [E, C]; experts.{e}.fc.weight [2I, C] (gate | up) and
// experts.{e}.proj.weight [C, I] (a rank's own experts only under expert parallelism);
// shared_expert.{fc, proj}.weight and shared_expert_gate.weight [1, C] with a shared expert.
#pragma once

#include "comm/communicator.h"
#include "nn/layer_factory.h"
#include "nn/loss.h"
#include "nn/router.h"

#include <map>
#include <vector>

namespace tidal::nn {

struct MoeConfig {
  int experts = 0;  // 0: the block has a dense MLP
  int experts_per_token = 2;
  std::int64_t expert_hidden = 0;  // each expert's SwiGLU width
  std::int64_t shared_hidden = 0;  // the shared expert's SwiGLU width; 0 = none
  bool normalize_top_k = true;     // the k weights renormalized to sum 1 (Mixtral; Qwen2-MoE's norm_topk_prob)
  double capacity_factor = 0.0;    // > 0: an expert takes at most ceil(factor N k / E) picks, the rest dropped
  double aux_loss_coef = 0.0;      // the load-balancing loss's coefficient
  double z_loss_coef = 0.0;        // the router z-loss's coefficient
  int moe_layers = 1;              // the model's MoE layers: each adds 1/moe_layers of its losses
  int layer = 0;                   // this one's block index (the metrics' key)
  bool recompute_activation = false;  // the experts' SwiGLU outputs remade in backward
};

// What one MoE layer routed over a step's micro-batches on this rank.
struct ExpertLoad {
  std::vector<double> tokens;  // [E]: rows each expert ran
  double dropped = 0;          // picks past capacity
  double balance_loss = 0;     // the layer's load-balancing loss, weighted by the micro-batches' shares
  double z_loss = 0;           // its z-loss, as weighted
};

// A step's routing, by block index, and the auxiliary losses' part of the step's loss.
struct ExpertRecord {
  std::map<int, ExpertLoad> layers;
  double loss = 0;
  // Under expert parallelism, this rank's rows that crossed to other ranks of its expert group
  // (its picks of their experts) and came from them (their picks of its experts), summed over the
  // step's layers and micro-batches: each row goes out and back in forward and again in backward.
  double rows_sent = 0, rows_received = 0;
};

class MixtureOfExperts final : public Module {
 public:
  // batch_groups: the ranks holding other parts of the replica's micro-batch (sequence
  // parallelism), over which the router's statistics are summed.
  // expert_group: the ranks that split the experts (null: this rank holds them all).
  MixtureOfExperts(std::int64_t n_embd, const MoeConfig& cfg, ParameterInit init, ParameterInit proj_init,
                   LayerFactory& layers, std::vector<comm::Communicator*> batch_groups = {},
                   comm::Communicator* expert_group = nullptr);

  Tensor forward(const Tensor& x, Context& ctx) override;  // [..., C] -> [..., C]
  Tensor backward(const Tensor& dy, Context& ctx) override;

  struct Exchange;  // expert parallelism's moves of one forward (nn/moe.cpp)

 private:
  RouterOptions router_options() const;
  Exchange plan_exchange(const Routing& r, Device device) const;
  // This rank's experts' rows [L, C] from every rank's rows for them (expert-major slots), and
  // back: rows [L, C] -> this rank's slots [P, C].
  Tensor to_experts(const Tensor& slots, const Exchange& x, Context& ctx) const;
  Tensor from_experts(const Tensor& rows, const Exchange& x, Context& ctx) const;
  // out's rows of each expert (rows [offset e, offset e+1)) from in's: its output in forward, its
  // input gradient in backward; the experts one at a time, or at once where concurrent().
  void run_experts(const Tensor& in, Tensor& out, const std::vector<std::int64_t>& offset, Context& ctx,
                   bool backward) const;
  bool concurrent(const Tensor& x, const StepState& state, bool backward) const;

  MoeConfig cfg_;
  std::int64_t C_;
  Module* gate_;
  std::vector<Module*> experts_;
  Module* shared_ = nullptr;
  Module* shared_gate_ = nullptr;
  std::vector<comm::Communicator*> batch_groups_;
  comm::Communicator* expert_group_;
  int first_expert_ = 0;  // this rank's experts: [first_expert_, first_expert_ + experts_.size())
  bool whole_linears_;    // the experts' linears are whole on each rank (no tensor parallelism)
};

}  // namespace tidal::nn
