#include "pipeline/schedule.h"

#include "core/error.h"

#include <algorithm>

namespace tidal::pipeline {
namespace {

// The k-th forward (or backward) of the interleaved schedule: micro-batches advance in groups
// of p through chunk 0, then the same group through chunk 1, ...; backwards visit chunks in
// reverse (Megatron-LM's interleaved 1F1B).
Action interleaved_action(Action::Kind kind, int k, int p, int v) {
  const int in_group = k % (p * v);
  const int chunk = in_group / p;
  return {kind, (k / (p * v)) * p + k % p, kind == Action::forward ? chunk : v - 1 - chunk};
}

// ZB-H1: 1F1B's forwards and B's, rank s keeping the W's of its last s B's pending.
std::vector<Action> zero_bubble_h1(int p, int s, int m) {
  std::vector<Action> out;
  const int warmup = std::min(p - s - 1, m);
  for (int i = 0; i < warmup; ++i) out.push_back({Action::forward, i});
  int next_w = 0;  // the oldest micro-batch whose W has not run
  for (int i = 0; i < m; ++i) {
    if (warmup + i < m) out.push_back({Action::forward, warmup + i});
    out.push_back({Action::input_gradient, i});
    // While forwards come between the B's, s W's stay pending; in the cool-down each B brings one.
    const int pending = warmup + i < m ? s : 0;
    if (i + 1 - next_w > pending) out.push_back({Action::weight_gradient, next_w++});
  }
  while (next_w < m) out.push_back({Action::weight_gradient, next_w++});
  return out;
}

}  // namespace

std::vector<Action> schedule(ScheduleKind kind, int stages, int stage, int micro_batches, int chunks) {
  const int p = stages, s = stage, m = micro_batches;
  TIDAL_ASSERT(p >= 1 && s >= 0 && s < p && m >= 1 && chunks >= 1, "schedule({} stages, stage {}, {} micro-batches)",
               p, s, m);
  TIDAL_CHECK(kind == ScheduleKind::interleaved || chunks == 1,
              "parallel.virtual_stages = {} needs parallel.schedule = \"interleaved\"", chunks);
  std::vector<Action> out;
  if (kind == ScheduleKind::zb_h1) return zero_bubble_h1(p, s, m);
  if (kind == ScheduleKind::gpipe) {
    for (int i = 0; i < m; ++i) out.push_back({Action::forward, i});
    for (int i = 0; i < m; ++i) out.push_back({Action::backward, i});
    return out;
  }
  const int v = chunks, total = m * v;
  TIDAL_CHECK(kind != ScheduleKind::interleaved || m % p == 0,
              "parallel.schedule = \"interleaved\" runs micro-batches in groups of parallel.pipeline = {}: the {} "
              "micro-batches per step (train.batch_size / parallel.data / train.micro_batch_size) must be a multiple "
              "of {}",
              p, m, p);
  auto action = [&](Action::Kind k, int i) {
    return kind == ScheduleKind::interleaved ? interleaved_action(k, i, p, v) : Action{k, i};
  };
  // Forwards in flight before the first backward: enough to fill the pipeline below this rank.
  int warmup = kind == ScheduleKind::interleaved ? (m == p ? total : 2 * (p - s - 1) + (v - 1) * p) : p - s - 1;
  warmup = std::min(warmup, total);
  for (int i = 0; i < warmup; ++i) out.push_back(action(Action::forward, i));
  for (int i = 0; i < total - warmup; ++i) {
    out.push_back(action(Action::forward, warmup + i));
    out.push_back(action(Action::backward, i));
  }
  for (int i = total - warmup; i < total; ++i) out.push_back(action(Action::backward, i));
  return out;
}

}  // namespace tidal::pipeline
