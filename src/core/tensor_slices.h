// Blocks of a global tensor and the elements they share: how a tensor written in blocks under one
// layout is read back in the blocks of another (a sharded checkpoint loaded by other ranks).
//
// A Slice is a box of the global tensor: its start and extent in every dimension. A stored block
// holds one or more slices back to back along dimension 0 (a fused weight's segments: q | k | v),
// a Piece saying which of its rows hold which slice. Everything is row-major and contiguous.
#pragma once

#include "core/shape.h"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tidal {

struct Slice {
  Shape start, extent;
  std::int64_t numel() const { return extent.numel(); }
  bool operator==(const Slice& o) const { return start == o.start && extent == o.extent; }
};

// Rows [row, row + slice.extent[0]) of a block hold `slice` of the global tensor.
struct Piece {
  std::int64_t row = 0;
  Slice slice;
  bool operator==(const Piece& o) const { return row == o.row && slice == o.slice; }
};

// The elements two slices of one tensor share.
std::int64_t overlap_elements(const Slice& a, const Slice& b);

// Copies the elements that slice `from` (its values at `src`, contiguous over from.extent) shares
// with slice `to` (at `dst`, contiguous over to.extent) into their places in `dst`; returns how
// many. Runs along the last dimension are copied whole.
std::int64_t copy_overlap(const void* src, const Slice& from, void* dst, const Slice& to, std::size_t element_bytes);

// The same between blocks of pieces: every piece of `from` (its rows of the block at `src`)
// against every piece of `to` (its rows of the block at `dst`). A block's rows are all as wide
// as its pieces' slices are after dimension 0.
std::int64_t copy_overlap(const void* src, const std::vector<Piece>& from, void* dst, const std::vector<Piece>& to,
                          std::size_t element_bytes);

// Elements of a block of these pieces (the rows they cover, at their slices' widths).
std::int64_t block_elements(const std::vector<Piece>& pieces);

}  // namespace tidal
