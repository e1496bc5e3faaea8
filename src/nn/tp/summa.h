// SUMMA products on a q x q grid of ranks (optimus-2d.txt sec. 3.1, Algorithms 1-3; van de
// Geijn's SUMMA). Rank (i, j) holds block (i, j) of every matrix: X [N, in] as X_ij (rows block
// i, columns block j), a weight W [out, in] (PyTorch's layout) as W_ij (output rows block i,
// input columns block j). `row` is the group of rank (i, *) ordered by j, `col` the group of
// (*, j) ordered by i.
//
//   forward   Y = X W^T:  Y_il = sum_j X_ij W_lj^T   for each l: broadcast W_lj down the column,
//                                                    multiply, reduce along the row to (i, l)
//                                                    (Alg. 2, C = A B^T)
//   backward  dX = dY W:  dX_ij = sum_l dY_il W_lj   for each l: broadcast dY_il along the row
//                                                    and W_lj down the column (Alg. 1, C = A B)
//             dW = dY^T X: dW_lj = sum_i dY_il^T X_ij  with the same dY_il, reduce down the
//                                                    column to (l, j) (Alg. 3, C = A^T B)
//
// So Y_ij's features are the output block j, like X's: hidden states keep one layout through
// every linear. A tied LM head is the same product with the embedding table as W.
//
// 2.5D with depth d > 1 holds each weight block (i, j) in d row slices, slice k in depth layer k,
// so that every element lives once in the tensor group (as in 1D and 3D, not d times): the same
// products with W_lj arriving slice by slice - down the column in the layer that holds it, then
// over the depth group - and each slice of dW_lj summed over the depth group, then down the
// column in its layer. One slice of W (and of dW) is held at a time beside the rank's own.
#pragma once

#include "comm/communicator.h"
#include "core/tensor.h"

namespace tidal::nn::tp {

// y2 [N, out/q] = this rank's block of X W^T; x2 [N, in/q] and w [out/q, in/q] its blocks.
void summa_forward(Tensor& y2, const Tensor& x2, const Tensor& w, comm::Communicator& row, comm::Communicator& col);

// dx2 [N, in/q] = this rank's block of dY W; dw [out/q, in/q] += its block of dY^T X (dw undefined:
// a frozen weight, no gradient and none of its collectives).
void summa_backward(Tensor& dx2, Tensor& dw, const Tensor& dy2, const Tensor& x2, const Tensor& w,
                    comm::Communicator& row, comm::Communicator& col);

// The weight's blocks in depth slices: a block's rows are [segments][d slices][w's rows per
// segment], and this rank holds slice depth->rank() of block (i, j).
struct DepthSlices {
  comm::Communicator* depth = nullptr;  // (i, j, *) ordered by k
  int segments = 1;
};
// As above with w [out/(q d), in/q] this rank's slice (y2 [N, out/q] as before; dw its slice).
void summa_forward(Tensor& y2, const Tensor& x2, const Tensor& w, comm::Communicator& row, comm::Communicator& col,
                   const DepthSlices& slices);
void summa_backward(Tensor& dx2, Tensor& dw, const Tensor& dy2, const Tensor& x2, const Tensor& w,
                    comm::Communicator& row, comm::Communicator& col, const DepthSlices& slices);

}  // namespace tidal::nn::tp
