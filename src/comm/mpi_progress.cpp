#include "comm/mpi_progress.h"

#include "core/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>

namespace tidal::comm {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kProbeTag = 1;   // question: a group id
constexpr int kAnswerTag = 2;  // answer: kAnswerBytes of text, what the rank is doing in that group
// How long a watchdog waits for answers: living ranks answer within milliseconds.
constexpr auto kDiagnosisWindow = std::chrono::seconds(3);
// Unproductive polls before the thread starts sleeping between polls (keeps latency low for
// short operations without stealing a core from compute during long ones).
constexpr int kSpinPolls = 32;
constexpr auto kPollSleep = std::chrono::microseconds(50);
constexpr auto kIdleWait = std::chrono::milliseconds(5);

std::string rank_list(const std::vector<int>& ranks) {
  return fmt::format("{}", fmt::join(ranks, ","));
}

std::string seconds_text(Seconds s) { return fmt::format("{:g} s", s.count()); }

}  // namespace

MpiProgress::MpiProgress(MPI_Comm world) {
  MPI_Comm_dup(world, &watch_);
  MPI_Comm_set_errhandler(watch_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(world, &world_rank_);
  thread_ = std::thread([this] { loop(); });
}

MpiProgress::~MpiProgress() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  queued_cv_.notify_all();
  thread_.join();
  for (auto& a : answers_) MPI_Request_free(&a->request);
  for (auto& g : groups_) {
    if (g && g->comm != MPI_COMM_NULL) MPI_Comm_free(&g->comm);
  }
  MPI_Comm_free(&watch_);
}

void MpiProgress::register_group(std::shared_ptr<GroupInfo> group) {
  if (groups_.size() <= std::size_t(group->id)) groups_.resize(std::size_t(group->id) + 1);
  groups_[std::size_t(group->id)] = std::move(group);
}

// A Work whose waiter tells the progress thread it waits (MpiProgress::waiters_).
class MpiWork final : public Work {
 public:
  explicit MpiWork(MpiProgress& progress) : progress_(progress) {}
  void wait() override {
    ++progress_.waiters_;
    progress_.queued_cv_.notify_one();
    try {
      Work::wait();
    } catch (...) {
      --progress_.waiters_;
      throw;
    }
    --progress_.waiters_;
  }

 private:
  MpiProgress& progress_;
};

WorkPtr MpiProgress::submit(MpiOperation op) {
  op.work = std::make_shared<MpiWork>(*this);
  WorkPtr work = op.work;
  {
    std::lock_guard lock(mutex_);
    TIDAL_ASSERT(!stopping_, "operation submitted after MPI shut down");
    queue_.push_back(std::move(op));
  }
  queued_cv_.notify_one();
  return work;
}

void MpiProgress::run(std::function<void()> task) {
  std::mutex done_mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::exception_ptr error;
  {
    std::lock_guard lock(mutex_);
    tasks_.push_back([&] {
      try {
        task();
      } catch (...) {
        error = std::current_exception();
      }
      std::lock_guard l(done_mutex);
      done = true;
      done_cv.notify_one();
    });
  }
  queued_cv_.notify_one();
  std::unique_lock lock(done_mutex);
  done_cv.wait(lock, [&] { return done; });
  if (error) std::rethrow_exception(error);
}

void MpiProgress::loop() {
  int unproductive = 0;
  for (;;) {
    std::deque<std::function<void()>> tasks;
    {
      std::unique_lock lock(mutex_);
      if (in_flight_.empty() && queue_.empty() && tasks_.empty()) {
        if (stopping_) return;
        queued_cv_.wait_for(lock, kIdleWait);
      }
      tasks.swap(tasks_);
    }
    for (auto& t : tasks) t();
    start_queued();
    const bool progressed = test_in_flight();
    answer_probes();

    const auto now = Clock::now();
    for (const InFlight& f : in_flight_) {
      if (now > f.deadline) diagnose_and_abort(f);
    }
    unproductive = progressed ? 0 : unproductive + 1;
    if (!in_flight_.empty() && unproductive > kSpinPolls) {
      // While this rank's caller waits, its core is free: poll on (a large collective advances
      // only as it is tested), yielding to any other rank's thread sharing the core. While it
      // computes, poll sparingly.
      if (waiters_.load(std::memory_order_relaxed) > 0) std::this_thread::yield();
      else std::this_thread::sleep_for(kPollSleep);
    }
  }
}

void MpiProgress::start_queued() {
  std::deque<MpiOperation> ops;
  {
    std::lock_guard lock(mutex_);
    ops.swap(queue_);
  }
  for (MpiOperation& op : ops) {
    MPI_Request request = MPI_REQUEST_NULL;
    try {
      op.start(&request);
    } catch (...) {
      const std::exception_ptr error = std::current_exception();
      op.start = nullptr;
      op.finish = nullptr;
      op.work->mark_completed(error);
      continue;
    }
    const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(op.timeout);
    in_flight_.push_back({std::move(op), deadline});
    requests_.push_back(request);
  }
}

bool MpiProgress::test_in_flight() {
  if (in_flight_.empty()) return false;
  const std::size_t n = requests_.size();
  completed_.resize(n);
  statuses_.resize(n);
  int count = 0;
  const int rc = MPI_Testsome(int(n), requests_.data(), &count, completed_.data(), statuses_.data());
  if (rc != MPI_SUCCESS && rc != MPI_ERR_IN_STATUS) {
    // The call itself failed: no request can be trusted to complete, so all of them fail.
    count = int(n);
    for (std::size_t i = 0; i < n; ++i) completed_[i] = int(i), statuses_[i].MPI_ERROR = rc;
  }
  if (count == MPI_UNDEFINED || count == 0) return false;
  for (int k = 0; k < count; ++k) {
    MpiOperation& op = in_flight_[std::size_t(completed_[std::size_t(k)])].op;
    const int status = rc == MPI_SUCCESS ? MPI_SUCCESS : statuses_[std::size_t(k)].MPI_ERROR;
    std::exception_ptr error;
    if (status != MPI_SUCCESS) {
      char text[MPI_MAX_ERROR_STRING];
      int len = 0;
      MPI_Error_string(status, text, &len);
      error = std::make_exception_ptr(Error(fmt::format("{} #{} on group '{}' failed: {}", op.kind, op.seq,
                                                        op.group->name, std::string(text, std::size_t(len)))));
    } else {
      try {
        if (op.finish) op.finish();
      } catch (...) {
        error = std::current_exception();
      }
    }
    // The operation's tensors (held by its start and finish) go before the caller wakes: a
    // caller that frees a buffer after wait() must free its memory then (the chunks' accounting).
    WorkPtr work = std::move(op.work);  // marks the slot for removal below
    op.start = nullptr;
    op.finish = nullptr;
    work->mark_completed(error);
  }
  // Keep the operations still in flight, in call order.
  std::size_t kept = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!in_flight_[i].op.work) continue;
    if (kept != i) {
      in_flight_[kept] = std::move(in_flight_[i]);
      requests_[kept] = requests_[i];
    }
    ++kept;
  }
  in_flight_.resize(kept);
  requests_.resize(kept);
  return true;
}

std::string MpiProgress::describe_state(int group_id) const {
  std::string ops;
  for (const InFlight& f : in_flight_) {
    if (f.op.group->id == group_id) ops += fmt::format("{}{} #{}", ops.empty() ? "" : "; ", f.op.kind, f.op.seq);
  }
  if (!ops.empty()) return "in " + ops;
  const std::int64_t issued =
      std::size_t(group_id) < groups_.size() && groups_[std::size_t(group_id)] ? groups_[std::size_t(group_id)]->issued.load() : 0;
  return fmt::format("outside any operation of this group ({} completed; busy computing or stuck elsewhere)", issued);
}

void MpiProgress::answer_probes() {
  // Finished answers are released; new questions are answered from this rank's state.
  std::erase_if(answers_, [](std::unique_ptr<Answer>& a) {
    int done = 0;
    MPI_Test(&a->request, &done, MPI_STATUS_IGNORE);
    return done != 0;
  });
  for (;;) {
    int pending = 0;
    MPI_Status status;
    if (MPI_Iprobe(MPI_ANY_SOURCE, kProbeTag, watch_, &pending, &status) != MPI_SUCCESS || !pending) return;
    int group_id = 0;
    MPI_Recv(&group_id, 1, MPI_INT, status.MPI_SOURCE, kProbeTag, watch_, MPI_STATUS_IGNORE);
    auto answer = std::make_unique<Answer>();
    std::snprintf(answer->text.data(), answer->text.size(), "%s", describe_state(group_id).c_str());
    MPI_Isend(answer->text.data(), int(answer->text.size()), MPI_CHAR, status.MPI_SOURCE, kAnswerTag, watch_,
              &answer->request);
    answers_.push_back(std::move(answer));
  }
}

void MpiProgress::diagnose_and_abort(const InFlight& late) {
  const MpiOperation& op = late.op;
  const GroupInfo& g = *op.group;
  struct Asked {
    int group_rank, world_rank;
    int question;
    std::array<char, kAnswerBytes> answer{};
    MPI_Request send = MPI_REQUEST_NULL, recv = MPI_REQUEST_NULL;
    bool answered = false;
  };
  std::vector<Asked> asked;
  asked.reserve(op.waits_for.size());
  for (int r : op.waits_for) {
    const int w = g.world_ranks[std::size_t(r)];
    if (w == world_rank_) continue;
    asked.push_back({r, w, g.id});
  }
  for (Asked& a : asked) {
    MPI_Isend(&a.question, 1, MPI_INT, a.world_rank, kProbeTag, watch_, &a.send);
    MPI_Irecv(a.answer.data(), kAnswerBytes, MPI_CHAR, a.world_rank, kAnswerTag, watch_, &a.recv);
  }
  const auto until = Clock::now() + kDiagnosisWindow;
  while (Clock::now() < until) {
    bool all = true;
    for (Asked& a : asked) {
      if (!a.answered) {
        int done = 0;
        MPI_Test(&a.recv, &done, MPI_STATUS_IGNORE);
        a.answered = done != 0;
      }
      all = all && a.answered;
    }
    answer_probes();  // other ranks may be diagnosing too
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  std::vector<std::string> missing;
  for (const Asked& a : asked) {
    const std::string who = g.name == "world" ? fmt::format("rank {}", a.world_rank)
                                              : fmt::format("rank {} (world rank {})", a.group_rank, a.world_rank);
    if (!a.answered) {
      missing.push_back(fmt::format("{}: no answer (the process is dead or hung)", who));
    } else if (std::string(a.answer.data()).find(op.peer_shows) == std::string::npos) {
      missing.push_back(fmt::format("{}: it is {}", who, std::string(a.answer.data())));
    }
  }
  std::string message = fmt::format(
      "tidal: watchdog on world rank {}: {} #{} on group '{}' (world ranks {}) did not complete within {}.\n",
      world_rank_, op.kind, op.seq, g.name, rank_list(g.world_ranks), seconds_text(op.timeout));
  if (missing.empty()) {
    message += "  Every rank it waits for is inside it: the transport is stuck.\n";
  } else {
    message += "  Ranks that did not arrive:\n";
    for (const std::string& m : missing) message += "    " + m + "\n";
  }
  message += "  If a rank is legitimately slow (a long evaluation or checkpoint), raise parallel.timeout_s.\n";
  std::fflush(stdout);
  std::fputs(message.c_str(), stderr);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::abort();
}

}  // namespace tidal::comm
