// The thread that makes every MPI call after MPI_Init (MPI_THREAD_SERIALIZED), like c10d's
// ProcessGroupMPI worker: callers enqueue operations and get a Work; this thread starts them
// as non-blocking MPI requests in call order, tests them, and completes their Works. Many
// operations can be in flight at once (gradient buckets, a send beside a receive).
//
// It is also the watchdog. An operation still running after its timeout is diagnosed: this rank
// asks every rank the operation waits for what it is doing (over a private duplicate of
// MPI_COMM_WORLD; each rank's progress thread answers even while its main thread computes), then
// prints which ranks did not arrive - dead (no answer), in another operation, or busy elsewhere -
// and aborts the job. So a dead or mismatched rank ends the run instead of hanging it.
#pragma once

#include "comm/communicator.h"

#include <mpi.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace tidal::comm {

// What the watchdog knows about a group (shared by a communicator and its operations).
struct GroupInfo {
  int id = 0;                   // creation index, equal on every rank
  std::string name;             // "data", "tensor_row", ...
  std::vector<int> world_ranks;  // world rank of each group rank
  MPI_Comm comm = MPI_COMM_NULL;
  std::atomic<std::int64_t> issued{0};      // collectives called on this group so far (this rank)
  std::atomic<std::int64_t> p2p_issued{0};  // sends and receives (numbered apart: they differ by rank)
};

struct MpiOperation {
  std::string kind;               // "all_reduce", "recv from 2 (tag 0)", ...
  std::int64_t seq = 0;           // 1-based index among the group's collectives (or sends and receives)
  std::string peer_shows;         // what a rank it waits for reports when it has arrived
  GroupInfo* group = nullptr;
  std::vector<int> waits_for;     // group ranks whose participation it needs
  Seconds timeout{0};
  std::function<void(MPI_Request*)> start;  // issues the non-blocking call
  std::function<void()> finish;             // after completion, e.g. the 1/size of an average
  WorkPtr work;
};

class MpiProgress {
 public:
  static constexpr int kAnswerBytes = 512;  // a watchdog answer: what the rank is doing in the group

  explicit MpiProgress(MPI_Comm world);
  ~MpiProgress();  // completes everything queued, then stops
  MpiProgress(const MpiProgress&) = delete;
  MpiProgress& operator=(const MpiProgress&) = delete;

  // Makes the group known to the watchdog (its questions name groups by id).
  void register_group(std::shared_ptr<GroupInfo> group);
  WorkPtr submit(MpiOperation op);
  // Runs `task` on the progress thread (communicator creation, abort) and waits for it.
  void run(std::function<void()> task);

 private:
  struct InFlight {
    MpiOperation op;
    std::chrono::steady_clock::time_point deadline;
  };
  void loop();
  void start_queued();
  bool test_in_flight();
  void answer_probes();
  std::string describe_state(int group_id) const;
  [[noreturn]] void diagnose_and_abort(const InFlight& late);

  friend class MpiWork;
  // Threads blocked in a Work::wait of this rank: their cores are idle, so the progress thread
  // polls without sleeping (and only yields) while there are any.
  std::atomic<int> waiters_{0};

  MPI_Comm watch_ = MPI_COMM_NULL;  // private duplicate of the world for watchdog questions
  int world_rank_ = 0;
  std::mutex mutex_;
  std::condition_variable queued_cv_;
  std::deque<MpiOperation> queue_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::shared_ptr<GroupInfo>> groups_;  // by id
  std::vector<InFlight> in_flight_;       // progress thread only
  std::vector<MPI_Request> requests_;     // parallel to in_flight_
  std::vector<int> completed_;            // MPI_Testsome scratch, reused across polls
  std::vector<MPI_Status> statuses_;
  struct Answer {  // a reply being sent to another rank's watchdog (the buffer outlives the send)
    MPI_Request request = MPI_REQUEST_NULL;
    std::array<char, kAnswerBytes> text{};
  };
  std::vector<std::unique_ptr<Answer>> answers_;
  std::thread thread_;
};

}  // namespace tidal::comm
