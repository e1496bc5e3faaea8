// Pipeline schedules: the ordered forward and backward passes each pipeline rank runs in one
// training step (colossal-ai.txt sec. II-B-2; GPipe; PipeDream-flush "1F1B"; Megatron-LM's
// interleaved 1F1B). A rank runs its list in order, blocking only to receive the activation or
// gradient an action needs; sends never block. Pure functions: the unit test simulates every
// rank's list to prove the schedules finish and to count their bubbles.
//
// Model chunk c of rank s is virtual stage c * p + s of the p * v virtual stages (v = 1 outside
// the interleaved schedule): chunk 0 of every rank, then chunk 1, ...
#pragma once

#include <string>
#include <vector>

namespace tidal::pipeline {

enum class ScheduleKind { gpipe, one_f_one_b, interleaved };

struct Action {
  enum Kind { forward, backward } kind;
  int micro_batch;
  int chunk = 0;  // model chunk on this rank
  friend bool operator==(const Action&, const Action&) = default;
};

// The actions of pipeline rank `stage` of `stages` for `micro_batches` micro-batches and
// `chunks` model chunks per rank. GPipe: every forward, then every backward. 1F1B: p - s - 1
// warm-up forwards, then one forward one backward, then the remaining backwards (at most
// p - s micro-batches' activations alive). Interleaved: the same with micro-batches in groups
// of p per chunk; needs micro_batches divisible by stages (a tidal::Error naming the keys).
std::vector<Action> schedule(ScheduleKind kind, int stages, int stage, int micro_batches, int chunks = 1);

}  // namespace tidal::pipeline
