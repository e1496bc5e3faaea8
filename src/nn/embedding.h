// Embedding tables: token / token-type lookup, and learned positions added to an input.
#pragma once

#include "nn/module.h"

namespace tidal::nn {

// A module that looks rows of a table up by id and owns the table (a tied head borrows it).
class TableLookup : public Module {
 public:
  virtual Parameter& table() = 0;
};

// y [B, T, C] = table[ids [B, T]]; backward accumulates the table gradient and returns no dx.
class Embedding final : public TableLookup {
 public:
  Embedding(std::int64_t num, std::int64_t dim, ParameterInit init);

  Tensor forward(const Tensor& ids, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

  Parameter& table() override { return *table_; }

 private:
  Parameter* table_;  // [num, dim]
};

// y [B, T, C] = x + table[first_position + t]; positions beyond the table are an error.
class PositionEmbedding final : public Module {
 public:
  PositionEmbedding(std::int64_t max_positions, std::int64_t dim, ParameterInit init);

  Tensor forward(const Tensor& x, Context& ctx) override;
  Tensor backward(const Tensor& dy, Context& ctx) override;

  Parameter& table() { return *table_; }

 private:
  Parameter* table_;  // [max_positions, dim]
};

}  // namespace tidal::nn
