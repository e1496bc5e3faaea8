// A frozen base streamed from the host or disk (finetune.base_offload = "host" | "disk"): the
// parameters of a LoRA run's frozen base (nn::Parameter::frozen) live in the host tier, or in a
// file in memory.disk_dir (disk_store.h), and each module's come into the step's memory (the
// default allocator: the activations' pool, on the device) only while the module runs - its
// forward, its backward (which needs the weight for the input gradient) or its recomputed forward -
// and go again after, as ZeRO-Infinity streams parameters. A parameter in NF4
// (finetune.base_dtype = "nf4") travels as its codes. So the device holds the adapters, their
// optimizer states and the activations, and of the base only the largest module's weights at a
// time; the cost is one copy (a read from the file) of the base per forward and per backward. From
// disk, the host holds none of the base: each read goes straight into the step's memory when that
// is host memory, else through a host buffer of the one tensor.
//
// Invariant: between uses a streamed parameter's `data` (or `nf4`) is its host copy, or from disk a
// placeholder of its shape and dtype in meta memory (nothing to read; its bytes still count); a
// module run inside another's (an adapter, a block's layers) that uses the same parameter shares
// the fetched copy (a count of the runs in progress).
#pragma once

#include "memory/disk_store.h"
#include "nn/module.h"
#include "nn/runner.h"
#include "ops/nf4.h"

#include <map>
#include <memory>
#include <span>
#include <string>

namespace tidal::memory {

class FrozenBaseStream final : public nn::ModuleHooks {
 public:
  // From the host: `frozen` held there (their data, or their NF4 codes).
  explicit FrozenBaseStream(std::span<nn::Parameter* const> frozen);
  // From disk: a file of `bytes` in `dir` (memory.disk_dir) for this rank, which store() fills.
  FrozenBaseStream(const std::string& dir, int rank, std::int64_t bytes);
  ~FrozenBaseStream() override;
  FrozenBaseStream(const FrozenBaseStream&) = delete;
  FrozenBaseStream& operator=(const FrozenBaseStream&) = delete;

  // From disk: p (frozen, just made in host memory: its data or NF4 codes) goes into the file, and
  // p holds its placeholder after.
  void store(nn::Parameter& p);

  void before_forward(nn::Module& m) override { fetch(m); }
  void after_forward(nn::Module& m) override { release(m); }
  void before_backward(nn::Module& m) override { fetch(m); }
  void after_backward(nn::Module& m) override { release(m); }
  void after_backward_part(nn::Module& m) override { release(m); }
  // A W pass reads no frozen weight: the base goes after B.
  void after_input_gradient(nn::Module& m, std::span<nn::Parameter* const>) override { release(m); }
  void after_weight_gradient(nn::Module&, std::span<nn::Parameter* const>) override {}

  // Bytes copied into the step's memory since the last call (the metrics' base_stream_bytes).
  std::int64_t take_streamed_bytes();
  // The file of a stream from disk (null from the host).
  const DiskStore* file() const { return file_.get(); }

 private:
  struct Held {
    Tensor data;                                // between uses: the host copy or a placeholder (empty for NF4)
    std::shared_ptr<const ops::Nf4Weight> nf4;  // between uses: the host codes or a placeholder
    std::int64_t at = -1;                       // from disk: where its bytes start in the file
    int runs = 0;                               // runs in progress that use it
  };
  void fetch(nn::Module& m);
  void release(nn::Module& m);
  // A tensor like `like` in the step's memory, read from the file at `at` (advanced past it).
  Tensor read(const Tensor& like, std::int64_t& at);

  std::map<nn::Parameter*, Held> held_;
  std::unique_ptr<DiskStore> file_;
  std::int64_t stored_ = 0;  // from disk: bytes of the file filled
  std::int64_t streamed_bytes_ = 0;
};

}  // namespace tidal::memory
