// A mixture of experts' router on the host (nn/moe.h): softmax over the experts' logits, each
// token's top k, their weights (renormalized to sum 1 if asked, Mixtral; or the probabilities
// themselves, Qwen2-MoE's norm_topk_prob = false), each pick's row in the experts' batches, and the
// losses that keep the experts in use: Switch's load-balancing loss (Fedus et al. 2022, eq. 4-6,
// as transformers' load_balancing_loss_func computes it for one layer) and ST-MoE's router
// z-loss (Zoph et al. 2022, eq. 5). The logits are a [tokens, experts] table, small beside the
// experts' work, so the router runs in fp32 on the host and its gradient goes back the same way.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace tidal::nn {

struct RouterOptions {
  int experts = 0;
  int top_k = 1;
  bool normalize = true;         // the top k weights divided by their sum
  double capacity_factor = 0.0;  // > 0: an expert takes at most ceil(factor N k / E) picks; 0 = every pick
  bool pad = true;               // each expert's rows padded to padded_rows (false: expert parallelism pads
                                 // an expert's rows where they meet, nn/moe.h)
};

// The routing of N tokens. Slots are expert-major: expert e's rows are [offset[e], offset[e+1]),
// its tokens in token order, then padding rows (token -1, weight 0) up to padded_rows(its picks);
// a pick beyond its expert's capacity has slot -1 (dropped).
struct Routing {
  std::int64_t tokens = 0;
  std::vector<float> probs;            // [N, E]: the softmax
  std::vector<float> lse;              // [N]: the logits' log-sum-exp (the z-loss)
  std::vector<std::int32_t> expert;    // [N, k]: each token's picks, most probable first
  std::vector<float> weight;           // [N, k]: the weight of each pick's output
  std::vector<std::int32_t> slot;      // [N, k]: each pick's row in the experts' batches, or -1
  std::vector<std::int32_t> token;     // [P]: each slot's token, -1 for padding
  std::vector<float> slot_weight;      // [P]: each slot's weight
  std::vector<std::int64_t> offset;    // [E + 1]
  std::vector<std::int64_t> kept;      // [E]: each expert's picks within capacity (its real rows)
  std::vector<double> chosen;          // [E]: picks of each expert before capacity (the balance loss's f)
  std::vector<double> prob_sum;        // [E]: each expert's probabilities summed over the tokens (its P)
  double dropped = 0;                  // picks past capacity
  double lse_squares = 0;              // sum over tokens of lse^2
};

// The rows an expert's batch of `picks` rows is padded to: at most 1/8 more, so a run's expert
// GEMMs come in a few sizes an octave (a CPU GEMM library builds a kernel per shape: oneDNN takes
// 0.3 ms for one, longer than a small product) rather than in every size from 0 to N k.
std::int64_t padded_rows(std::int64_t picks);

// Routes N tokens by their logits [N, E] (row-major fp32).
Routing route(const float* logits, std::int64_t N, const RouterOptions& opt);
// The routing of N tokens spread evenly, as a plan assumes it (no logits: the cost model's meta
// step): each expert takes N k / E picks (the first N k mod E one more), within capacity. The
// same for every block and micro-batch of a plan, so each thread keeps the last few it made (a
// plan's layouts route up to millions of tokens in every block: most of the planner's time).
std::shared_ptr<const Routing> planned_routing(std::int64_t N, const RouterOptions& opt);

// What the auxiliary losses read of a replica's tokens: chosen and prob_sum per expert, the
// tokens and the summed lse^2, as one vector to sum over the ranks holding other parts of it
// (sequence parallelism) - [2E + 2].
std::vector<double> replica_statistics(const Routing& r);

// The losses over the replica's statistics (replica_statistics, summed).
struct RouterLosses {
  double balance = 0;  // E sum_e f_e P_e, f_e = chosen_e / N, P_e = prob_sum_e / N
  double z = 0;        // mean over tokens of lse^2
};
RouterLosses router_losses(const std::vector<double>& replica, int experts);

// The logits' gradient [N, E] (row-major fp32) from the gradient of the picks' weights
// dweight [N, k], plus balance_scale x d balance and z_scale x d z (their replica's statistics).
std::vector<float> router_backward(const Routing& r, const RouterOptions& opt, const float* dweight,
                                   const std::vector<double>& replica, double balance_scale, double z_scale);

}  // namespace tidal::nn
