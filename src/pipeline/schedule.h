// Pipeline schedules: the ordered forward and backward passes each pipeline rank runs in one
// training step (colossal-ai.txt sec. II-B-2; GPipe; PipeDream-flush "1F1B"; Megatron-LM's
// interleaved 1F1B). A rank runs its list in order, blocking only to receive the activation or
// gradient an action needs; sends never block. Pure functions: the unit test simulates every
// rank's list to prove the schedules finish and to count their bubbles.
//
// Model chunk c of rank s is virtual stage c * p + s of the p * v virtual stages (v = 1 outside
// the interleaved schedule): chunk 0 of every rank, then chunk 1, ...; under ZB-V chunk 1 of rank
// s is virtual stage 2p - 1 - s (a V: rank 0 holds the first and the last).
//
// The zero-bubble schedule (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024) splits a
// backward into its input gradient B, which the previous stage waits for, and its weight
// gradient W, which nobody waits for, and runs the W's where 1F1B would idle.
#pragma once

#include <string>
#include <vector>

namespace tidal::pipeline {

enum class ScheduleKind { gpipe, one_f_one_b, interleaved, zb_h1, zb_v };

struct Action {
  // backward: the input and the weight gradients at once; input_gradient (B) and weight_gradient
  // (W): the two halves of one, W after its B (zero-bubble schedules).
  enum Kind { forward, backward, input_gradient, weight_gradient } kind;
  int micro_batch;
  int chunk = 0;  // model chunk on this rank
  friend bool operator==(const Action&, const Action&) = default;
};

// The actions of pipeline rank `stage` of `stages` for `micro_batches` micro-batches and
// `chunks` model chunks per rank. GPipe: every forward, then every backward. 1F1B: p - s - 1
// warm-up forwards, then one forward one backward, then the remaining backwards (at most
// p - s micro-batches' activations alive). Interleaved: the same with micro-batches in groups
// of p per chunk; needs micro_batches divisible by stages (a tidal::Error naming the keys).
// ZB-H1 (the paper's sec. 3.1): 1F1B's warm-up and order of forwards and B's, each W as late as
// keeps the stage's activations at 1F1B's first stage's (p micro-batches): rank s holds the W's
// of its last s B's back (`held_weight_gradients` of them where that is fewer), so the W's of the
// end stages fill what 1F1B leaves idle at the start and the end. With forward, B and W a unit
// each, its idle time is (p-1) units against 1F1B's 3(p-1) (B and W fused).
// ZB-V (sec. 4): two chunks per rank in a V; its order is found by running the pipeline with a
// unit per F, B and W, each rank keeping at most 2p chunks' activations (those of 1F1B's first
// rank), its W's where it would otherwise idle (schedule.cpp says how).
std::vector<Action> schedule(ScheduleKind kind, int stages, int stage, int micro_batches, int chunks = 1,
                             int held_weight_gradients = -1);

// What the replayed step finds on one stage of a ZB-H1 pipeline before the run (sim/cost_model.h's
// zero_bubble_holds): its activation peak with each backward whole (1F1B's), with each W right
// after its B (none held: the B's own W's add to it), and what one W kept (its linears' inputs and
// output gradients: about a micro-batch's activations, the paper's M_W beside M_B).
struct StageMemory {
  double fused_peak = 0, split_peak = 0, held_bytes = 0;
};
// How many W's each stage of ZB-H1 holds back (the held_weight_gradients of schedule()): stage s
// up to s, as the paper counts, but no more than keep its peak (split_peak plus what its held W's
// keep: an estimate from above) within `memory` times 1F1B's largest (parallel.zb_memory). A last
// stage holds its head's and loss's activations beside its s W's: there the paper's count passes
// 1F1B's first stage (by 10.2% at pipeline 4, 8 micro-batches, a GPT of 8 layers; 2.2% with one
// fewer held, memory = 1.05's choice). The figures come from the replay, not a run's own peaks,
// which vary by a message between stages (a send frees its tensor when it completes): every run
// and rank takes the same counts.
std::vector<int> held_weight_gradients(const std::vector<StageMemory>& stages, double memory);

// Whether a schedule splits backwards into input_gradient and weight_gradient actions.
inline bool splits_backward(ScheduleKind kind) { return kind == ScheduleKind::zb_h1 || kind == ScheduleKind::zb_v; }

// The virtual stage of model chunk `chunk` on rank `stage`, and the rank holding a virtual stage.
int virtual_stage(ScheduleKind kind, int stages, int stage, int chunk);
int stage_of(ScheduleKind kind, int stages, int virtual_stage);

}  // namespace tidal::pipeline
