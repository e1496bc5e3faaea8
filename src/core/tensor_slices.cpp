#include "core/tensor_slices.h"

#include "core/error.h"

#include <algorithm>
#include <cstring>

namespace tidal {
namespace {

// The box both slices cover (empty: some extent 0).
Slice intersection(const Slice& a, const Slice& b) {
  TIDAL_ASSERT(a.start.size() == b.start.size() && a.extent.size() == a.start.size() &&
                   b.extent.size() == b.start.size(),
               "slices of {} and {} dimensions", a.start.size(), b.start.size());
  Slice out{a.start, a.extent};
  for (int d = 0; d < a.start.size(); ++d) {
    const std::int64_t lo = std::max(a.start[d], b.start[d]);
    const std::int64_t hi = std::min(a.start[d] + a.extent[d], b.start[d] + b.extent[d]);
    out.start[d] = lo;
    out.extent[d] = std::max<std::int64_t>(0, hi - lo);
  }
  return out;
}

// Row-major offset (elements) of global index `at` inside `box`.
std::int64_t offset_in(const Slice& box, const Shape& at) {
  std::int64_t o = 0;
  for (int d = 0; d < box.start.size(); ++d) o = o * box.extent[d] + (at[d] - box.start[d]);
  return o;
}

std::int64_t row_width(const std::vector<Piece>& pieces) {
  if (pieces.empty()) return 0;
  const Shape& e = pieces[0].slice.extent;
  std::int64_t w = 1;
  for (int d = 1; d < e.size(); ++d) w *= e[d];
  return w;
}

}  // namespace

std::int64_t overlap_elements(const Slice& a, const Slice& b) { return intersection(a, b).numel(); }

std::int64_t copy_overlap(const void* src, const Slice& from, void* dst, const Slice& to, std::size_t element_bytes) {
  const Slice common = intersection(from, to);
  const std::int64_t n = common.numel();
  if (n == 0) return 0;
  const int nd = common.start.size();
  TIDAL_ASSERT(nd >= 1, "a slice of a 0-d tensor");
  // Runs along the last dimension; an index over the leading ones walks the common box.
  const std::size_t run = std::size_t(common.extent[nd - 1]) * element_bytes;
  Shape at = common.start;
  const auto* s = static_cast<const std::byte*>(src);
  auto* t = static_cast<std::byte*>(dst);
  for (std::int64_t done = 0; done < n; done += common.extent[nd - 1]) {
    std::memcpy(t + std::size_t(offset_in(to, at)) * element_bytes, s + std::size_t(offset_in(from, at)) * element_bytes,
                run);
    for (int d = nd - 2; d >= 0; --d) {  // the next run: odometer over the leading dimensions
      if (++at[d] < common.start[d] + common.extent[d]) break;
      at[d] = common.start[d];
    }
  }
  return n;
}

std::int64_t copy_overlap(const void* src, const std::vector<Piece>& from, void* dst, const std::vector<Piece>& to,
                          std::size_t element_bytes) {
  const std::int64_t wf = row_width(from), wt = row_width(to);
  std::int64_t n = 0;
  for (const Piece& f : from)
    for (const Piece& t : to)
      n += copy_overlap(static_cast<const std::byte*>(src) + std::size_t(f.row * wf) * element_bytes, f.slice,
                        static_cast<std::byte*>(dst) + std::size_t(t.row * wt) * element_bytes, t.slice, element_bytes);
  return n;
}

std::int64_t block_elements(const std::vector<Piece>& pieces) {
  std::int64_t n = 0;
  for (const Piece& p : pieces) n += p.slice.numel();
  return n;
}

}  // namespace tidal
