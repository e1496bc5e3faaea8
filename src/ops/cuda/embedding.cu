// Embedding lookups and learned position embeddings on the GPU (ops/embedding.h). Every sum is
// taken in the CPU backend's order (tokens in increasing position, batch entries in increasing
// index), in fp32 and rounded once, so the GPU matches the CPU bit for bit and is reproducible.
//
// The table gradient is a scatter-add by id, done without float atomics: the (id, position)
// pairs are sorted on the device (CUB radix sort of a composite key (id << position bits) |
// position, so the order within one id is the token order whatever the sort's stability), then a
// block per run of equal ids adds that id's dy rows, in token order, into its table row. No two
// blocks touch one row, and no host synchronisation is needed.
//
// Ids outside [0, V) are the user error the CPU backend reports: the forward kernel records the
// first offending position in a device word, and the launcher reads it back (one small
// synchronisation: the batch has just been uploaded, so there is little queued work to wait for)
// and throws the CPU's message. The backward takes the ids the forward accepted and does not
// check them again; it skips ids outside the table instead of writing out of bounds.
#include "ops/embedding.h"

#include "core/gpu.h"
#include "ops/cuda/common.cuh"

#include <cub/device/device_radix_sort.cuh>

#include <bit>
#include <limits>

namespace tidal::ops::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kChannelThreads = 128;  // embedding backward: channels of one table row per block
constexpr int kUnroll = 4;            // dy rows loaded ahead of their (in-order) additions

// ---- kernels ----

// y [N, C] = (or +=) table [V, C] rows at ids [N]. first_bad: the smallest position whose id is
// neither a row nor kIdElsewhere (integer atomicMin: the same answer whatever the timing).
template <class T>
__global__ void embedding_forward_kernel(T* __restrict__ y, unsigned long long* __restrict__ first_bad,
                                         const std::int32_t* __restrict__ ids, const T* __restrict__ table,
                                         std::int64_t N, std::int64_t V, std::int64_t C, bool accumulate) {
  TIDAL_CUDA_FOR(i, N * C) {
    const std::int64_t n = i / C, c = i - n * C;
    const std::int32_t id = ids[n];
    if (id >= 0 && id < V) {
      const T v = table[std::int64_t(id) * C + c];
      y[i] = accumulate ? store<T>(load(y[i]) + load(v)) : v;
    } else {
      if (!accumulate) y[i] = store<T>(0.0f);
      if (id != kIdElsewhere && c == 0) atomicMin(first_bad, static_cast<unsigned long long>(n));
    }
  }
}

// keys [N] = (row << position_bits) | n, where row is the id, or V for an id with no row here
// (kIdElsewhere): those sort last and are skipped.
__global__ void embedding_sort_keys_kernel(unsigned long long* __restrict__ keys, const std::int32_t* __restrict__ ids,
                                           std::int64_t N, std::int64_t V, int position_bits) {
  TIDAL_CUDA_FOR(n, N) {
    const std::int32_t id = ids[n];
    const unsigned long long row = id >= 0 && id < V ? static_cast<unsigned long long>(id)
                                                     : static_cast<unsigned long long>(V);
    keys[n] = (row << position_bits) | static_cast<unsigned long long>(n);
  }
}

// Grid (N, channel tiles). Block i works only if sorted[i] starts a run of one id: it adds, per
// channel, dy at the run's positions in increasing order into an fp32 copy of the table entry
// and stores it once (the CPU's fp32 accumulation of a low-precision table).
template <class T>
__global__ void embedding_backward_kernel(T* __restrict__ dtable, const T* __restrict__ dy,
                                          const unsigned long long* __restrict__ sorted, std::int64_t N,
                                          std::int64_t V, std::int64_t C, int position_bits) {
  const std::int64_t i = blockIdx.x;
  const unsigned long long row = sorted[i] >> position_bits;
  if (row == static_cast<unsigned long long>(V)) return;
  if (i > 0 && (sorted[i - 1] >> position_bits) == row) return;
  const std::int64_t c = blockIdx.y * std::int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  std::int64_t end = i + 1;
  while (end < N && (sorted[end] >> position_bits) == row) ++end;
  const unsigned long long position_mask = (1ull << position_bits) - 1;
  T* out = dtable + std::int64_t(row) * C + c;
  float acc = load(*out);
  std::int64_t j = i;
  for (; j + kUnroll <= end; j += kUnroll) {
    float v[kUnroll];
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) v[k] = load(dy[std::int64_t(sorted[j + k] & position_mask) * C + c]);
#pragma unroll
    for (int k = 0; k < kUnroll; ++k) acc += v[k];
  }
  for (; j < end; ++j) acc += load(dy[std::int64_t(sorted[j] & position_mask) * C + c]);
  *out = store<T>(acc);
}

// y [B, T, C] += table [first_position + t]; y is read and written by the same thread.
template <class T>
__global__ void position_embedding_forward_kernel(T* __restrict__ y, const T* __restrict__ table, std::int64_t n,
                                                  std::int64_t T_, std::int64_t C) {
  TIDAL_CUDA_FOR(i, n) {
    const std::int64_t c = i % C, t = (i / C) % T_;
    y[i] = store<T>(load(y[i]) + load(table[t * C + c]));
  }
}

// dtable [first_position + t, c] += sum over b (in order) of dy [b, t, c]; a thread per (t, c).
template <class T>
__global__ void position_embedding_backward_kernel(T* __restrict__ dtable, const T* __restrict__ dy, std::int64_t B,
                                                   std::int64_t T_, std::int64_t C) {
  TIDAL_CUDA_FOR(i, T_ * C) {
    float s = 0.0f;
    for (std::int64_t b = 0; b < B; ++b) s += load(dy[b * T_ * C + i]);
    dtable[i] = store<T>(load(dtable[i]) + s);
  }
}

// local = ids rebased to [first, first + count), kIdElsewhere for other rows; first_bad as the
// forward's, for an id outside [0, vocab).
__global__ void embedding_shard_ids_kernel(std::int32_t* __restrict__ local, unsigned long long* __restrict__ first_bad,
                                           const std::int32_t* __restrict__ ids, std::int64_t n, std::int64_t first,
                                           std::int64_t count, std::int64_t vocab) {
  TIDAL_CUDA_FOR(i, n) {
    const std::int64_t id = ids[i];
    if (id < 0 || id >= vocab) atomicMin(first_bad, static_cast<unsigned long long>(i));
    local[i] = id >= first && id < first + count ? std::int32_t(id - first) : kIdElsewhere;
  }
}

// The CPU backend's error for an id outside [0, vocab), where a kernel found one.
void refuse_bad_id(const FirstBad& first_bad, const Tensor& ids, std::int64_t vocab) {
  if (const std::optional<std::int64_t> bad = first_bad.position())
    TIDAL_CHECK(false,
                "token id {} at position {} is outside the vocabulary [0, {}): check model.vocab_size against the "
                "data",
                FirstBad::value_at(ids, *bad), *bad, vocab);
}

void expect_ids(const Tensor& ids) {
  expect_cuda_contiguous(ids, "embedding ids");
  TIDAL_ASSERT(ids.dtype() == DType::i32, "embedding ids must be i32, got {}", ids.str());
}

}  // namespace

// ---- launchers ----

void embedding_forward(Tensor& y, const Tensor& ids, const Tensor& table, bool accumulate) {
  expect_cuda_contiguous({&y, &table}, "embedding operand");
  expect_ids(ids);
  const std::int64_t V = table.dim(0), C = table.dim(1), N = ids.numel();
  TIDAL_ASSERT(y.numel() == N * C && y.dtype() == table.dtype(), "embedding y {} for ids {} table {}", y.str(),
               ids.str(), table.str());
  if (N == 0 || C == 0) return;
  const cudaStream_t stream = compute_stream();
  FirstBad first_bad(stream);
  with_float_type(y.dtype(), [&]<class T>() {
    embedding_forward_kernel<T><<<blocks_for(N * C, kThreads), kThreads, 0, stream>>>(
        ptr<T>(y), first_bad.device(), ptr<std::int32_t>(ids), ptr<T>(table), N, V, C, accumulate);
  });
  TIDAL_CUDA_CHECK_LAUNCH("embedding_forward_kernel");
  refuse_bad_id(first_bad, ids, V);
}

void embedding_backward(Tensor& dtable, const Tensor& dy, const Tensor& ids) {
  expect_cuda_contiguous({&dtable, &dy}, "embedding backward operand");
  expect_ids(ids);
  const std::int64_t V = dtable.dim(0), C = dtable.dim(1), N = ids.numel();
  TIDAL_ASSERT(dy.numel() == N * C && dy.dtype() == dtable.dtype(), "embedding dy {} for ids {} dtable {}", dy.str(),
               ids.str(), dtable.str());
  if (N == 0 || C == 0 || V == 0) return;
  const std::int64_t channel_tiles = (C + kChannelThreads - 1) / kChannelThreads;
  TIDAL_ASSERT(N <= std::numeric_limits<int>::max() && V <= std::numeric_limits<std::int32_t>::max() &&
                   channel_tiles <= 65535,
               "embedding backward of {} tokens into table {}: too large for one launch", N, dtable.str());
  const int position_bits = std::bit_width(static_cast<std::uint64_t>(N - 1));
  const int end_bit = position_bits + std::bit_width(static_cast<std::uint64_t>(V));  // <= 31 + 31
  const cudaStream_t stream = compute_stream();
  // Two arrays of N 64-bit keys (unsorted, sorted), held as i32 tensors of 2N elements.
  Tensor keys = Tensor::empty({2 * N}, DType::i32, gpu_allocator());
  Tensor sorted = Tensor::empty({2 * N}, DType::i32, gpu_allocator());
  auto* keys_p = ptr<unsigned long long>(keys);
  auto* sorted_p = ptr<unsigned long long>(sorted);
  embedding_sort_keys_kernel<<<blocks_for(N, kThreads), kThreads, 0, stream>>>(keys_p, ptr<std::int32_t>(ids), N, V,
                                                                                position_bits);
  TIDAL_CUDA_CHECK_LAUNCH("embedding_sort_keys_kernel");
  std::size_t temp_bytes = 0;
  TIDAL_CUDA_CALL(
      cub::DeviceRadixSort::SortKeys(nullptr, temp_bytes, keys_p, sorted_p, int(N), 0, end_bit, stream));
  // CUB treats a null buffer as a size query, so never hand it an empty (null) tensor.
  Tensor temp = Tensor::empty({std::int64_t(temp_bytes / 4 + 1)}, DType::i32, gpu_allocator());
  TIDAL_CUDA_CALL(
      cub::DeviceRadixSort::SortKeys(temp.raw(), temp_bytes, keys_p, sorted_p, int(N), 0, end_bit, stream));
  with_float_type(dy.dtype(), [&]<class T>() {
    const dim3 grid{unsigned(N), unsigned(channel_tiles)};
    embedding_backward_kernel<T>
        <<<grid, kChannelThreads, 0, stream>>>(ptr<T>(dtable), ptr<T>(dy), sorted_p, N, V, C, position_bits);
  });
  TIDAL_CUDA_CHECK_LAUNCH("embedding_backward_kernel");
}

void position_embedding_forward(Tensor& y, const Tensor& table, std::int64_t first_position) {
  expect_cuda_contiguous(y, "position y");
  expect_cuda_contiguous(table, "position table");
  TIDAL_ASSERT(y.ndim() == 3 && y.dim(2) == table.dim(1) && y.dtype() == table.dtype(), "position y {} table {}",
               y.str(), table.str());
  const std::int64_t T = y.dim(1), C = y.dim(2), n = y.numel();
  TIDAL_CHECK(first_position + T <= table.dim(0),
              "sequence of {} tokens from position {} is longer than the {} learned positions (model.seq_len)", T,
              first_position, table.dim(0));
  if (n == 0) return;
  with_float_type(y.dtype(), [&]<class Tp>() {
    position_embedding_forward_kernel<Tp><<<blocks_for(n, kThreads), kThreads, 0, compute_stream()>>>(
        ptr<Tp>(y), ptr<Tp>(table) + first_position * C, n, T, C);
  });
  TIDAL_CUDA_CHECK_LAUNCH("position_embedding_forward_kernel");
}

void position_embedding_backward(Tensor& dtable, const Tensor& dy, std::int64_t first_position) {
  expect_cuda_contiguous(dtable, "position dtable");
  expect_cuda_contiguous(dy, "position dy");
  TIDAL_ASSERT(dy.ndim() == 3 && dy.dtype() == dtable.dtype(), "position dy {} dtable {}", dy.str(), dtable.str());
  const std::int64_t B = dy.dim(0), T = dy.dim(1), C = dy.dim(2);
  TIDAL_ASSERT(first_position + T <= dtable.dim(0) && dtable.dim(1) == C, "position dtable {} dy {}", dtable.str(),
               dy.str());
  if (T * C == 0) return;
  with_float_type(dy.dtype(), [&]<class Tp>() {
    position_embedding_backward_kernel<Tp><<<blocks_for(T * C, kThreads), kThreads, 0, compute_stream()>>>(
        ptr<Tp>(dtable) + first_position * C, ptr<Tp>(dy), B, T, C);
  });
  TIDAL_CUDA_CHECK_LAUNCH("position_embedding_backward_kernel");
}

void embedding_shard_ids(Tensor& local, const Tensor& ids, std::int64_t first, std::int64_t count, std::int64_t vocab) {
  expect_ids(ids);
  expect_ids(local);
  TIDAL_ASSERT(local.numel() == ids.numel(), "embedding_shard_ids: local {} for ids {}", local.str(), ids.str());
  const std::int64_t n = ids.numel();
  if (n == 0) return;
  const cudaStream_t stream = compute_stream();
  FirstBad first_bad(stream);
  embedding_shard_ids_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      ptr<std::int32_t>(local), first_bad.device(), ptr<std::int32_t>(ids), n, first, count, vocab);
  TIDAL_CUDA_CHECK_LAUNCH("embedding_shard_ids_kernel");
  refuse_bad_id(first_bad, ids, vocab);
}

}  // namespace tidal::ops::cuda
