#include "pipeline/schedule.h"

#include "core/error.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
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

// ZB-H1: 1F1B's forwards and B's, rank s keeping the W's of its last `held` B's pending.
std::vector<Action> zero_bubble_h1(int p, int s, int m, int held) {
  std::vector<Action> out;
  const int warmup = std::min(p - s - 1, m);
  for (int i = 0; i < warmup; ++i) out.push_back({Action::forward, i});
  int next_w = 0;  // the oldest micro-batch whose W has not run
  for (int i = 0; i < m; ++i) {
    if (warmup + i < m) out.push_back({Action::forward, warmup + i});
    out.push_back({Action::input_gradient, i});
    // While forwards come between the B's, `held` W's stay pending; in the cool-down each B brings one.
    const int pending = warmup + i < m ? held : 0;
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
class VPipeline {
 public:
  VPipeline(int p, int m) : p_(p), m_(m), ranks_(std::size_t(p)) {
    for (auto& kind : done_) kind.assign(std::size_t(2 * p), std::vector<int>(std::size_t(m), kNotYet));
  }

  // Runs every rank until each has run F, B and W of every micro-batch on its two chunks.
  void run() {
    for (int t = 0, left = 6 * p_ * m_; left > 0; ++t) {
      TIDAL_ASSERT(t < 48 * (m_ + p_), "ZB-V's run of {} stages and {} micro-batches does not finish", p_, m_);
      std::vector<std::pair<int, Action>> started;  // (rank, action): their results count from t + 1
      for (int r = 0; r < p_; ++r)
        if (const std::optional<Action> a = take(r, t)) {
          started.emplace_back(r, *a);
          --left;
        }
      for (const auto& [r, a] : started)
        if (a.kind != Action::weight_gradient)
          done_[a.kind == Action::forward ? 0 : 1][std::size_t(vs(r, a.chunk))][std::size_t(a.micro_batch)] = t + 1;
    }
  }
  const std::vector<Action>& actions(int rank) const { return ranks_[std::size_t(rank)].actions; }

 private:
  static constexpr int kNotYet = -1;
  struct Rank {
    int next_forward[2] = {0, 0}, next_b[2] = {0, 0}, alive = 0;
    std::vector<Action> actions;
    std::deque<Action> pending_w;  // the W's whose B ran, oldest first
  };

  int vs(int rank, int chunk) const { return virtual_stage(ScheduleKind::zb_v, p_, rank, chunk); }
  // F (kind 0) or B (kind 1) of micro-batch i on virtual stage v finished by the start of unit t.
  bool finished(int kind, int v, int i, int t) const {
    const int at = done_[std::size_t(kind)][std::size_t(v)][std::size_t(i)];
    return at != kNotYet && at <= t;
  }
  std::optional<Action> oldest_ready_b(int r, int t) const {
    const Rank& rank = ranks_[std::size_t(r)];
    std::optional<Action> pick;
    for (int c = 0; c < 2; ++c) {
      const int i = rank.next_b[c], v = vs(r, c);
      if (i >= m_ || !finished(0, v, i, t) || (v + 1 < 2 * p_ && !finished(1, v + 1, i, t))) continue;
      if (!pick || i < pick->micro_batch) pick = Action{Action::input_gradient, i, c};
    }
    return pick;
  }
  std::optional<Action> ready_forward(int r, int t) const {
    const Rank& rank = ranks_[std::size_t(r)];
    if (rank.alive >= 2 * p_) return std::nullopt;
    for (int c : {1, 0}) {
      const int i = rank.next_forward[c], v = vs(r, c);
      if (i < m_ && (v == 0 || finished(0, v - 1, i, t))) return Action{Action::forward, i, c};
    }
    return std::nullopt;
  }
  // Rank r's action of unit t (none: it idles), its state advanced.
  std::optional<Action> take(int r, int t) {
    Rank& rank = ranks_[std::size_t(r)];
    std::optional<Action> a = oldest_ready_b(r, t);
    if (!a) a = ready_forward(r, t);
    if (!a && !rank.pending_w.empty()) {
      a = rank.pending_w.front();
      rank.pending_w.pop_front();
    }
    if (!a) return std::nullopt;
    rank.actions.push_back(*a);
    if (a->kind == Action::forward) {
      ++rank.next_forward[a->chunk];
      ++rank.alive;
    } else if (a->kind == Action::input_gradient) {
      ++rank.next_b[a->chunk];
      rank.pending_w.push_back({Action::weight_gradient, a->micro_batch, a->chunk});
    } else {
      --rank.alive;
    }
    return a;
  }

  const int p_, m_;
  std::vector<Rank> ranks_;
  // done_[kind][vs][i]: the unit at whose end F (kind 0) or B (kind 1) of micro-batch i on
  // virtual stage vs finished.
  std::array<std::vector<std::vector<int>>, 2> done_;
};

std::vector<Action> zero_bubble_v(int p, int s, int m) {
  VPipeline run(p, m);
  run.run();
  return run.actions(s);
}

}  // namespace

std::vector<int> held_weight_gradients(const std::vector<StageMemory>& stages, double memory) {
  TIDAL_ASSERT(!stages.empty(), "no stages");
  double largest = 0;
  for (const StageMemory& m : stages) largest = std::max(largest, m.fused_peak);
  const double budget = memory * largest;
  std::vector<int> held;
  for (std::size_t s = 0; s < stages.size(); ++s) {
    const double room = std::floor((budget - stages[s].split_peak) / std::max(stages[s].held_bytes, 1.0));
    held.push_back(int(std::clamp(room, 0.0, double(s))));
  }
  return held;
}

int virtual_stage(ScheduleKind kind, int stages, int stage, int chunk) {
  return kind == ScheduleKind::zb_v && chunk == 1 ? 2 * stages - 1 - stage : chunk * stages + stage;
}

int stage_of(ScheduleKind kind, int stages, int virtual_stage) {
  return kind == ScheduleKind::zb_v && virtual_stage >= stages ? 2 * stages - 1 - virtual_stage : virtual_stage % stages;
}

std::vector<Action> schedule(ScheduleKind kind, int stages, int stage, int micro_batches, int chunks,
                             int held_weight_gradients) {
  const int p = stages, s = stage, m = micro_batches;
  TIDAL_ASSERT(p >= 1 && s >= 0 && s < p && m >= 1 && chunks >= 1, "schedule({} stages, stage {}, {} micro-batches)",
               p, s, m);
  TIDAL_CHECK(kind == ScheduleKind::interleaved || kind == ScheduleKind::zb_v || chunks == 1,
              "parallel.virtual_stages = {} needs parallel.schedule = \"interleaved\" or \"zb-v\"", chunks);
  TIDAL_CHECK(kind != ScheduleKind::zb_v || chunks == 2,
              "parallel.schedule = \"zb-v\" runs two model chunks per rank: it needs parallel.virtual_stages = 2, not {}",
              chunks);
  std::vector<Action> out;
  if (kind == ScheduleKind::zb_h1)
    return zero_bubble_h1(p, s, m, held_weight_gradients < 0 ? s : std::min(held_weight_gradients, s));
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
