#include "nn/tp/summa.h"

#include "nn/tp/shard.h"
#include "ops/gemm.h"
#include "ops/residual.h"

namespace tidal::nn::tp {
namespace {

// The root's own tensor (broadcast only reads it there), or a buffer to receive into.
Tensor broadcast_block(const Tensor& mine, comm::Communicator& g, int root) {
  Tensor buf = g.rank() == root ? mine : Tensor::empty(mine.shape(), mine.dtype());
  g.broadcast(buf, {.root = root})->wait();
  return buf;
}

}  // namespace

void summa_forward(Tensor& y2, const Tensor& x2, const Tensor& w, comm::Communicator& row, comm::Communicator& col,
                   const DepthSlices& slices) {
  comm::Communicator& depth = *slices.depth;
  const int q = row.size(), d = depth.size();
  Tensor scratch = Tensor::empty(y2.shape(), y2.dtype());
  Tensor panel = Tensor::empty({x2.dim(0), w.dim(0)}, y2.dtype());
  for (int l = 0; l < q; ++l) {
    const Tensor mine = broadcast_block(w, col, l);  // slice k of W_lj
    Tensor p = row.rank() == l ? y2 : scratch;
    for (int k = 0; k < d; ++k) {
      ops::gemm(panel, x2, broadcast_block(mine, depth, k), {.trans_b = true});  // X_ij (W_lj slice k)^T
      copy_part_columns(panel, p, k, d, slices.segments, true);
    }
    row.reduce(p, {.op = comm::ReduceOp::sum, .root = l})->wait();
  }
}

void summa_backward(Tensor& dx2, Tensor& dw, const Tensor& dy2, const Tensor& x2, const Tensor& w,
                    comm::Communicator& row, comm::Communicator& col, const DepthSlices& slices) {
  comm::Communicator& depth = *slices.depth;
  const int q = row.size(), d = depth.size();
  Tensor panel = Tensor::empty({dy2.dim(0), w.dim(0)}, dy2.dtype());
  for (int l = 0; l < q; ++l) {
    Tensor dy_l = broadcast_block(dy2, row, l);       // dY_il
    const Tensor mine = broadcast_block(w, col, l);  // slice k of W_lj
    for (int k = 0; k < d; ++k) {
      copy_part_columns(panel, dy_l, k, d, slices.segments, false);  // dY_il's columns of slice k
      ops::gemm(dx2, panel, broadcast_block(mine, depth, k), {.beta = l == 0 && k == 0 ? 0.0f : 1.0f});
      if (!dw.defined()) continue;  // a frozen weight
      // Slice k of dW_lj (once the slice of W is gone): summed over the depth group, then down
      // the column of layer k to (l, j).
      Tensor dw_part = Tensor::empty(dw.shape(), dy2.dtype());  // summed in the compute precision
      ops::gemm(dw_part, panel, x2, {.trans_a = true});
      depth.reduce(dw_part, {.op = comm::ReduceOp::sum, .root = k})->wait();
      if (depth.rank() != k) continue;
      col.reduce(dw_part, {.op = comm::ReduceOp::sum, .root = l})->wait();
      if (col.rank() == l) ops::accumulate(dw, dw_part);
    }
  }
}

void summa_forward(Tensor& y2, const Tensor& x2, const Tensor& w, comm::Communicator& row, comm::Communicator& col) {
  const int q = row.size();
  Tensor scratch = Tensor::empty(y2.shape(), y2.dtype());
  for (int l = 0; l < q; ++l) {
    const Tensor w_l = broadcast_block(w, col, l);    // W_lj
    Tensor p = row.rank() == l ? y2 : scratch;        // (i, l) receives Y_il
    ops::gemm(p, x2, w_l, {.trans_b = true});         // X_ij W_lj^T
    row.reduce(p, {.op = comm::ReduceOp::sum, .root = l})->wait();
  }
}

void summa_backward(Tensor& dx2, Tensor& dw, const Tensor& dy2, const Tensor& x2, const Tensor& w,
                    comm::Communicator& row, comm::Communicator& col) {
  const int q = row.size();
  Tensor dw_part = dw.defined() ? Tensor::empty(dw.shape(), dy2.dtype()) : Tensor();  // summed in the compute precision
  for (int l = 0; l < q; ++l) {
    const Tensor dy_l = broadcast_block(dy2, row, l);  // dY_il
    const Tensor w_l = broadcast_block(w, col, l);     // W_lj
    ops::gemm(dx2, dy_l, w_l, {.beta = l == 0 ? 0.0f : 1.0f});  // dX_ij += dY_il W_lj
    if (!dw.defined()) continue;                                // a frozen weight
    ops::gemm(dw_part, dy_l, x2, {.trans_a = true});            // dY_il^T X_ij, summed over i at (l, j)
    col.reduce(dw_part, {.op = comm::ReduceOp::sum, .root = l})->wait();
    if (col.rank() == l) ops::accumulate(dw, dw_part);
  }
}

}  // namespace tidal::nn::tp
