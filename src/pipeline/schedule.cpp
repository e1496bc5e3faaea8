#include "pipeline/schedule.h"

#include "core/error.h"

#include <algorithm>
#include <optional>

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

// ZB-V (the paper's sec. 4): two model chunks per rank in a V, chunk 0 down the ranks and chunk 1
// back up (virtual_stage), so the first and the last virtual stages are rank 0's. The order is
// found by running the pipeline: with forward, B and W a unit each and transfers free, every rank
// takes at each unit the oldest B that is ready, else a forward that is ready (chunk 1's first:
// it leads to the loss) while fewer than 2p of its chunks' activations are alive (F run, W not
// yet: 1F1B's first rank's p micro-batches of whole stages), else its oldest pending W. Each
// rank's list is its actions in the order of their start: a receive's sender started earlier,
// so the lists cannot deadlock.
std::vector<Action> zero_bubble_v(int p, int s, int m) {
  const int V = 2 * p, limit = 2 * p;
  constexpr int kNotYet = -1;
  // done[kind][vs][i]: the unit at whose end F (kind 0) or B (kind 1) of micro-batch i on virtual
  // stage vs finished.
  std::vector<std::vector<std::vector<int>>> done(2, std::vector<std::vector<int>>(V, std::vector<int>(m, kNotYet)));
  struct Rank {
    int next_forward[2] = {0, 0}, next_b[2] = {0, 0}, alive = 0;
    std::vector<Action> actions, pending_w;  // its list, and the W's whose B ran
  };
  std::vector<Rank> ranks(p);
  const auto finished = [&](int kind, int vs, int i, int t) { return done[kind][vs][i] != kNotYet && done[kind][vs][i] <= t; };
  int left = 3 * V * m;  // F, B and W of every micro-batch on every virtual stage
  for (int t = 0; left > 0; ++t) {
    TIDAL_ASSERT(t < 16 * (m + p) * 3, "ZB-V's simulation of {} stages and {} micro-batches does not finish", p, m);
    std::vector<std::pair<int, Action>> started;  // (rank, action): their results count from t + 1
    for (int r = 0; r < p; ++r) {
      Rank& rank = ranks[std::size_t(r)];
      std::optional<Action> pick;
      // The oldest ready B.
      for (int c = 0; c < 2; ++c) {
        const int i = rank.next_b[c], vs = virtual_stage(ScheduleKind::zb_v, p, r, c);
        if (i >= m || done[0][vs][i] == kNotYet || done[0][vs][i] > t) continue;
        if (vs + 1 < V && !finished(1, vs + 1, i, t)) continue;
        if (!pick || i < pick->micro_batch) pick = Action{Action::input_gradient, i, c};
      }
      if (!pick && rank.alive < limit)
        for (int c : {1, 0}) {
          const int i = rank.next_forward[c], vs = virtual_stage(ScheduleKind::zb_v, p, r, c);
          if (i >= m || (vs > 0 && !finished(0, vs - 1, i, t))) continue;
          pick = Action{Action::forward, i, c};
          break;
        }
      if (!pick && !rank.pending_w.empty()) {
        pick = rank.pending_w.front();
        rank.pending_w.erase(rank.pending_w.begin());
      }
      if (!pick) continue;
      rank.actions.push_back(*pick);
      started.emplace_back(r, *pick);
      --left;
      if (pick->kind == Action::forward) {
        ++rank.next_forward[pick->chunk];
        ++rank.alive;
      } else if (pick->kind == Action::input_gradient) {
        ++rank.next_b[pick->chunk];
        rank.pending_w.push_back({Action::weight_gradient, pick->micro_batch, pick->chunk});
      } else {
        --rank.alive;
      }
    }
    for (const auto& [r, a] : started)
      if (a.kind != Action::weight_gradient)
        done[a.kind == Action::forward ? 0 : 1][std::size_t(virtual_stage(ScheduleKind::zb_v, p, r, a.chunk))]
            [std::size_t(a.micro_batch)] = t + 1;
  }
  return ranks[std::size_t(s)].actions;
}

}  // namespace

int virtual_stage(ScheduleKind kind, int stages, int stage, int chunk) {
  return kind == ScheduleKind::zb_v && chunk == 1 ? 2 * stages - 1 - stage : chunk * stages + stage;
}

int stage_of(ScheduleKind kind, int stages, int virtual_stage) {
  return kind == ScheduleKind::zb_v && virtual_stage >= stages ? 2 * stages - 1 - virtual_stage : virtual_stage % stages;
}

std::vector<Action> schedule(ScheduleKind kind, int stages, int stage, int micro_batches, int chunks) {
  const int p = stages, s = stage, m = micro_batches;
  TIDAL_ASSERT(p >= 1 && s >= 0 && s < p && m >= 1 && chunks >= 1, "schedule({} stages, stage {}, {} micro-batches)",
               p, s, m);
  TIDAL_CHECK(kind == ScheduleKind::interleaved || kind == ScheduleKind::zb_v || chunks == 1,
              "parallel.virtual_stages = {} needs parallel.schedule = \"interleaved\" or \"zb-v\"", chunks);
  TIDAL_CHECK(kind != ScheduleKind::zb_v || chunks == 2,
              "parallel.schedule = \"zb-v\" runs two model chunks per rank: it needs parallel.virtual_stages = 2, not {}",
              chunks);
  std::vector<Action> out;
  if (kind == ScheduleKind::zb_h1) return zero_bubble_h1(p, s, m);
  if (kind == ScheduleKind::zb_v) return zero_bubble_v(p, s, m);
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
