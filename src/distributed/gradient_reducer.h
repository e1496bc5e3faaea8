// Data parallelism's gradient all-reduce, overlapped with backward (the shape of PyTorch DDP's
// Reducer). Parameter gradients are views into flat buckets of about parallel.bucket_mb, filled
// in reverse registration order (roughly the order backward produces them). A module's
// after_backward hook marks the parameters it used as done; when every parameter of a bucket is
// done, the bucket's all-reduce starts while backward goes on. Only the last micro-batch of a
// step communicates: earlier ones accumulate locally (set_sync(false)).
//
// Invariants: every data rank builds the same buckets and launches them in the same order; the
// loss scale (1 / global micro-batches) is applied before backward, so a sum is the mean.
#pragma once

#include "comm/communicator.h"
#include "models/model.h"
#include "nn/runner.h"

#include <chrono>
#include <unordered_map>
#include <vector>

namespace tidal::distributed {

class GradientReducer final : public nn::ModuleHooks {
 public:
  // Rebinds every parameter's grad to a view of its bucket (values preserved); buckets come
  // from `alloc` (where the gradients live).
  GradientReducer(models::Model& model, comm::Communicator& data_group, std::int64_t bucket_bytes,
                  Allocator& alloc = host_allocator());
  // The same for `params` only (a pipeline rank's), whose uses are counted in `roots`.
  GradientReducer(const std::vector<nn::Module*>& roots, std::vector<nn::Parameter*> params,
                  comm::Communicator& data_group, std::int64_t bucket_bytes, Allocator& alloc = host_allocator());

  // Whether the coming backward is the step's last (its buckets are all-reduced).
  void set_sync(bool sync);
  void after_backward(nn::Module& m) override;
  // After the last backward: launches any bucket not yet launched, waits for all of them.
  void finish();

  // Of the last synced backward: seconds the all-reduces were in flight (their union), and the
  // part of it after backward ended (exposed, the time finish() waited).
  double comm_seconds() const { return comm_seconds_; }
  double exposed_seconds() const { return exposed_seconds_; }
  std::size_t bucket_count() const { return buckets_.size(); }

 private:
  struct Bucket {
    Tensor flat;                         // [elements] the gradients of `params`, back to back
    std::vector<nn::Parameter*> params;
    int pending = 0;                     // parameters not yet done this backward
    comm::WorkPtr work;
  };
  void launch(Bucket& b);

  comm::Communicator& group_;
  std::vector<Bucket> buckets_;
  std::unordered_map<nn::Parameter*, int> bucket_of_;
  std::unordered_map<nn::Parameter*, int> uses_;       // modules that use the parameter per backward
  std::unordered_map<nn::Parameter*, int> remaining_;  // this backward's uses still to come
  bool sync_ = false;
  double comm_seconds_ = 0, exposed_seconds_ = 0;
};

}  // namespace tidal::distributed
