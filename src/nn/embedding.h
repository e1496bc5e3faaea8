// Embedding tables: token / token-type lookup, and learned positions added to an input.
#pragma once

#include "nn/batch_slice.h"
#include "nn/module.h"

namespace tidal::nn {

// A module that looks rows of a table up by id and owns the table (a tied head borrows it).
class TableLookup : public Module {
 public:
  virtual Parameter& table() = 0;
  // The table of an untied head (UntiedLmHead): never looked up, so not one of the table's users
  // (the chunk manager completes a gradient when its last user's backward is done).
  void keep_for_head() { looked_up_ = false; }
  std::vector<Parameter*> used_parameters() override {
    return looked_up_ ? Module::used_parameters() : std::vector<Parameter*>{};
  }

 private:
  bool looked_up_ = true;
};

// y [B', T', C] = table[ids], ids this rank's part of the batch's [B, T] (all of it by
// default); backward accumulates the table gradient and returns no dx.
class Embedding final : public TableLookup {
 public:
  Embedding(std::int64_t num, std::int64_t dim, ParameterInit init, BatchSlice part = {});

  Tensor forward(const Tensor& ids, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

  Parameter& table() override { return *table_; }

 private:
  Parameter* table_;  // [num, dim]
  BatchSlice part_;
};

// y [B, T', C] = x + table[position of t]: x holds its BatchSlice's samples and runs of positions
// of sequences of T' * positions.position_parts (positions [0, T') unless a sequence-parallel
// rank), or, where the batch packs documents (Batch::positions), each token's position in its
// document; positions beyond the table are an error.
class PositionEmbedding final : public Module {
 public:
  PositionEmbedding(std::int64_t max_positions, std::int64_t dim, ParameterInit init, BatchSlice positions = {});

  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

  Parameter& table() { return *table_; }

 private:
  // fn(rows of x [b, T', C] holding a run, the run's first position) for every run: all of x at
  // once for a single run, else each sample's rows of each run (contiguous).
  template <class Fn>
  void for_each_run(const Tensor& x, Fn&& fn) const;

  // This rank's tokens' positions in their documents [B', T'] (from the batch), undefined where
  // the batch has none.
  Tensor token_positions(const Context& ctx) const;

  Parameter* table_;  // [max_positions, dim]
  BatchSlice positions_;
};

}  // namespace tidal::nn
