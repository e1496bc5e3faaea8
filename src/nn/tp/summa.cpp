#include "nn/tp/summa.h"

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
  Tensor dw_part = Tensor::empty(dw.shape(), dw.dtype());
  for (int l = 0; l < q; ++l) {
    const Tensor dy_l = broadcast_block(dy2, row, l);  // dY_il
    const Tensor w_l = broadcast_block(w, col, l);     // W_lj
    ops::gemm(dx2, dy_l, w_l, {.beta = l == 0 ? 0.0f : 1.0f});  // dX_ij += dY_il W_lj
    ops::gemm(dw_part, dy_l, x2, {.trans_a = true});            // dY_il^T X_ij, summed over i at (l, j)
    col.reduce(dw_part, {.op = comm::ReduceOp::sum, .root = l})->wait();
    if (col.rank() == l) ops::accumulate(dw, dw_part);
  }
}

}  // namespace tidal::nn::tp
