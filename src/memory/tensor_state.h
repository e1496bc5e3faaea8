// The state of a parameter's tensor in its chunk (patrickstar-v2 Table 1) and the transitions
// between states (Fig. 6). A chunk's place in the memory tiers follows from the states of the
// tensors it holds (sec. 6.1.2):
//   every tensor FREE        -> the chunk needs no payload (it may be released or reused);
//   any tensor COMPUTE       -> the payload must be on the computing device;
//   otherwise (HOLD-like)    -> the payload must exist, in any tier.
#pragma once

#include <vector>

namespace tidal::memory {

enum class TensorState { free, compute, hold, hold_after_fwd, hold_after_bwd };

const char* state_name(TensorState s);  // "FREE", "COMPUTE", ...

// Fig. 6, with the moves chunk-based ZeRO and activation checkpointing add:
//   FREE -> HOLD            initialised, or fetched from the rank that owns the chunk;
//   FREE -> COMPUTE         accessed with no payload: zeroed first (Alg. 1 line 27);
//   HOLD -> COMPUTE         accessed for a forward, backward or optimizer step;
//   COMPUTE -> HOLD_AFTER_FWD   released after a forward;
//   COMPUTE -> HOLD_AFTER_BWD   released after its last backward in the pass (the gradient is
//                               complete and sits in the payload);
//   COMPUTE -> HOLD         released after a use that leaves it as it was (a tied parameter's
//                           first backward, the optimizer's write-back);
//   HOLD_AFTER_FWD -> HOLD  end of forward (so recomputation in backward is told apart);
//   HOLD_AFTER_FWD -> COMPUTE   used again: a tied parameter, or a recomputed forward's backward;
//   HOLD_AFTER_BWD -> COMPUTE   the optimizer reads the gradient;
//   HOLD_AFTER_BWD -> HOLD  the step wrote the parameter back;
//   any HOLD-like -> FREE   a remote chunk released (ZeRO-3, Alg. 2 line 27).
bool can_transition(TensorState from, TensorState to);

bool is_hold_like(TensorState s);

// Where a chunk may live, from its tensors' states.
enum class Placement { none_needed, computing_device, anywhere };
Placement placement_of(const std::vector<TensorState>& states);

}  // namespace tidal::memory
