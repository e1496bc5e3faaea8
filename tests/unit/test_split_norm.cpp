// A split norm's ops (ops/split_norm.h) on a row's features cut into 2 and 3 blocks, the blocks'
// sums added as the feature group's all-reduce adds them, against the whole row's LayerNorm and
// RMSNorm (ops/layernorm.h, ops/rms_norm.h; those are checked against PyTorch in the oracle):
// y, the row's mean and rstd, dx, and the accumulated dw and db.
#include "ops/layernorm.h"
#include "ops/residual.h"
#include "ops/rms_norm.h"
#include "ops/split_norm.h"
#include "support/random.h"
#include "support/tolerance.h"

#include <gtest/gtest.h>

namespace tidal {
namespace {

using testing::all_close;
using testing::randn;

// Block p of P of the last dimension of x [N, C], contiguous.
Tensor block(const Tensor& x, int p, int P) {
  const std::int64_t w = x.dim(-1) / P;
  return x.slice(x.ndim() - 1, p * w, (p + 1) * w).clone();
}

// The blocks side by side again.
Tensor joined(const std::vector<Tensor>& blocks) {
  const std::int64_t N = blocks[0].dim(0), w = blocks[0].dim(1);
  Tensor out = Tensor::empty({N, w * std::int64_t(blocks.size())});
  for (std::size_t p = 0; p < blocks.size(); ++p)
    out.slice(1, std::int64_t(p) * w, std::int64_t(p + 1) * w).copy_from(blocks[p]);
  return out;
}

// The group's sum of every block's [N, 2] sums.
Tensor group_sum(const std::vector<Tensor>& parts) {
  Tensor total = parts[0].clone();
  for (std::size_t p = 1; p < parts.size(); ++p) ops::accumulate(total, parts[p]);
  return total;
}

// Column j of [N, 2].
Tensor column(const Tensor& t, int j) { return t.slice(1, j, j + 1).clone().reshape({t.dim(0)}); }

struct Whole {
  Tensor y, mean, rstd, dx, dw, db;
};

struct Split {
  std::vector<Tensor> y, stats, dx, dw, db;
};

Split run_split(const Tensor& x, const Tensor& dy, const Tensor& w, const Tensor& b, const Tensor& dw0,
                const Tensor& db0, int P, const ops::SplitNormOptions& opt) {
  const std::int64_t N = x.dim(0);
  Split s;
  std::vector<Tensor> sums;
  for (int p = 0; p < P; ++p) {
    sums.push_back(Tensor::empty({N, 2}));
    ops::split_norm_sums(sums.back(), block(x, p, P), opt);
  }
  const Tensor total = group_sum(sums);
  std::vector<Tensor> grad_sums;
  for (int p = 0; p < P; ++p) {
    const Tensor xp = block(x, p, P), dyp = block(dy, p, P), wp = block(w.reshape({1, -1}), p, P).reshape({-1});
    const Tensor bp = opt.centered ? block(b.reshape({1, -1}), p, P).reshape({-1}) : Tensor();
    s.stats.push_back(total.clone());
    s.y.push_back(Tensor::empty(xp.shape()));
    ops::split_norm_forward(s.y.back(), s.stats.back(), xp, wp, bp, opt);
    s.dw.push_back(block(dw0.reshape({1, -1}), p, P).reshape({-1}));
    s.db.push_back(opt.centered ? block(db0.reshape({1, -1}), p, P).reshape({-1}) : Tensor());
    ops::split_norm_weight_grads(s.dw.back(), s.db.back(), dyp, xp, s.stats.back());
    grad_sums.push_back(Tensor::empty({N, 2}));
    ops::split_norm_grad_sums(grad_sums.back(), dyp, xp, s.stats.back(), wp, opt);
  }
  const Tensor grad_total = group_sum(grad_sums);
  for (int p = 0; p < P; ++p) {
    const Tensor xp = block(x, p, P), dyp = block(dy, p, P), wp = block(w.reshape({1, -1}), p, P).reshape({-1});
    s.dx.push_back(Tensor::empty(xp.shape()));
    ops::split_norm_backward(s.dx.back(), dyp, xp, s.stats.back(), wp, grad_total, opt);
  }
  return s;
}

std::vector<Tensor> reshaped_rows(const std::vector<Tensor>& v) {
  std::vector<Tensor> out;
  for (const Tensor& t : v) out.push_back(t.reshape({1, -1}));
  return out;
}

class SplitNormOps : public ::testing::TestWithParam<bool> {};

TEST_P(SplitNormOps, BlocksOfARowEqualTheWholeRowsNorm) {
  const bool centered = GetParam();
  const std::int64_t N = 37, C = 48;
  const Tensor x = randn({N, C}, 1, 3.0f), dy = randn({N, C}, 2), w = randn({C}, 3), b = randn({C}, 4);
  const Tensor dw0 = randn({C}, 5), db0 = randn({C}, 6);
  Whole whole{Tensor::empty({N, C}), Tensor::empty({N}), Tensor::empty({N}), Tensor::empty({N, C}), dw0.clone(),
              db0.clone()};
  if (centered) {
    ops::layernorm_forward(whole.y, whole.mean, whole.rstd, x, w, b, 1e-5f);
    ops::layernorm_backward(whole.dx, whole.dw, whole.db, dy, x, w, whole.mean, whole.rstd);
  } else {
    ops::rms_norm_forward(whole.y, whole.rstd, x, w, 1e-5f);
    ops::rms_norm_backward(whole.dx, whole.dw, dy, x, w, whole.rstd);
  }
  for (const int P : {1, 2, 3}) {
    SCOPED_TRACE(P);
    const Split s = run_split(x, dy, w, b, dw0, db0, P, {.centered = centered, .full = C, .eps = 1e-5f});
    EXPECT_TRUE(all_close(joined(s.y), whole.y, testing::kFp32));
    EXPECT_TRUE(all_close(joined(s.dx), whole.dx, testing::kFp32));
    EXPECT_TRUE(all_close(joined(reshaped_rows(s.dw)).reshape({C}), whole.dw, testing::kFp32));
    if (centered) {
      EXPECT_TRUE(all_close(joined(reshaped_rows(s.db)).reshape({C}), whole.db, testing::kFp32));
    }
    for (int p = 0; p < P; ++p) {
      const Tensor mean = centered ? whole.mean : Tensor::zeros({N});
      EXPECT_TRUE(all_close(column(s.stats[std::size_t(p)], 0), mean, testing::kFp32));
      EXPECT_TRUE(all_close(column(s.stats[std::size_t(p)], 1), whole.rstd, testing::kFp32));
    }
  }
}

INSTANTIATE_TEST_SUITE_P(, SplitNormOps, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "LayerNorm" : "RmsNorm"; });

}  // namespace
}  // namespace tidal
