#include "memory/tensor_state.h"

#include <algorithm>

namespace tidal::memory {

const char* state_name(TensorState s) {
  switch (s) {
    case TensorState::free: return "FREE";
    case TensorState::compute: return "COMPUTE";
    case TensorState::hold: return "HOLD";
    case TensorState::hold_after_fwd: return "HOLD_AFTER_FWD";
    case TensorState::hold_after_bwd: return "HOLD_AFTER_BWD";
  }
  return "?";
}

bool is_hold_like(TensorState s) {
  return s == TensorState::hold || s == TensorState::hold_after_fwd || s == TensorState::hold_after_bwd;
}

bool can_transition(TensorState from, TensorState to) {
  using S = TensorState;
  switch (from) {
    case S::free: return to == S::hold || to == S::compute;
    case S::hold: return to == S::compute || to == S::free;
    case S::compute: return to == S::hold_after_fwd || to == S::hold_after_bwd || to == S::hold;
    case S::hold_after_fwd: return to == S::hold || to == S::compute || to == S::free;
    case S::hold_after_bwd: return to == S::compute || to == S::hold || to == S::free;
  }
  return false;
}

Placement placement_of(const std::vector<TensorState>& states) {
  if (std::any_of(states.begin(), states.end(), [](TensorState s) { return s == TensorState::compute; }))
    return Placement::computing_device;
  if (std::all_of(states.begin(), states.end(), [](TensorState s) { return s == TensorState::free; }))
    return Placement::none_needed;
  return Placement::anywhere;
}

}  // namespace tidal::memory
