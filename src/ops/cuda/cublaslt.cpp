// The cuBLASLt handle, workspace and plan cache behind ops/cuda/cublaslt.h.
//
// Row-major through a column-major library. cuBLASLt's default order is column-major, and a
// contiguous row-major [R, C] matrix is, byte for byte, the column-major C x R matrix (its
// transpose) with leading dimension C. So the row-major product c = op(a) op(b) is computed as the
// column-major product c^T = op(b)^T op(a)^T:
//   cuBLASLt D = C (n x m, ld n)            <- our c [m, n]
//   cuBLASLt A = our b, op = trans_b: stored col-major n x k (ld n) for b [k, n] and used as is,
//                or k x n (ld k) for b [n, k] and transposed; either way op(A) = op(b)^T, n x k
//   cuBLASLt B = our a, op = trans_a: stored col-major k x m (ld k) for a [m, k] and used as is,
//                or m x k (ld m) for a [k, m] and transposed; either way op(B) = op(a)^T, k x m
// with cuBLASLt's (M, N, K) = (n, m, k): D[j, i] = sum_l op(A)[j, l] op(B)[l, i]
// = sum_l op(b)[l, j] op(a)[i, l] = c[i, j]. Each operand's layout is therefore just "its row-major
// shape, read as column-major", and each transpose flag carries straight across.
#include "ops/cuda/cublaslt.h"

#include "core/cuda/runtime.h"

#include <climits>
#include <cstddef>
#include <map>
#include <mutex>

namespace tidal::ops::cuda {
namespace {

// Enough for the split-K schemes of the shapes a transformer step runs; charged to the device tier.
constexpr std::size_t kWorkspaceBytes = std::size_t(32) << 20;

cublasLtHandle_t handle() {
  static const cublasLtHandle_t h = [] {
    cublasLtHandle_t created = nullptr;
    TIDAL_CUBLAS_CALL(cublasLtCreate(&created));
    return created;
  }();
  return h;
}

// The library's own scratch, like the CUDA context: outside the tiers' budgets (a device tier
// capped by memory.device_limit binds model and non-model data; the offload keeper leaves a tenth
// of the free memory for the libraries).
void* workspace() {
  static void* const w = [] {
    void* p = nullptr;
    TIDAL_CUDA_CALL(cudaMalloc(&p, kWorkspaceBytes));
    return p;
  }();
  return w;
}

// The largest power of two (at most 256, cuBLASLt's default assumption) dividing the address:
// a view into a chunk may start anywhere, and an algorithm that needs more alignment than the
// pointer has would read wrongly, so the heuristic is told, and the answer cached per alignment.
std::uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::uint32_t align = 256;
  while (align > 1 && address % align != 0) align /= 2;
  return align;
}

struct PlanKey {
  MatmulProblem problem;
  std::uint32_t align_a = 0, align_b = 0, align_c = 0;

  auto operator<=>(const PlanKey&) const = default;
};

// Layouts are named after tidal's operands (layout_a describes our a, which is cuBLASLt's B).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layout_a = nullptr, layout_b = nullptr, layout_c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool runs = true;  // false: a bias epilogue no algorithm offers (the caller adds the bias itself)
};

// A contiguous row-major [rows, cols] matrix (times `batch`, packed) as column-major cols x rows.
cublasLtMatrixLayout_t row_major_layout(cudaDataType_t type, std::int64_t rows, std::int64_t cols,
                                        std::int64_t batch) {
  cublasLtMatrixLayout_t layout = nullptr;
  TIDAL_CUBLAS_CALL(cublasLtMatrixLayoutCreate(&layout, type, std::uint64_t(cols), std::uint64_t(rows), cols));
  if (batch > 1) {
    const std::int32_t count = std::int32_t(batch);
    const std::int64_t stride = rows * cols;
    TIDAL_CUBLAS_CALL(
        cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    TIDAL_CUBLAS_CALL(cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                                       sizeof(stride)));
  }
  return layout;
}

void set_preference(cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, std::uint32_t v) {
  TIDAL_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref, attr, &v, sizeof(v)));
}

Plan make_plan(const PlanKey& key) {
  const MatmulProblem& p = key.problem;
  Plan plan;
  TIDAL_CUBLAS_CALL(cublasLtMatmulDescCreate(&plan.desc, p.compute, CUDA_R_32F));
  // cuBLASLt's A is our b and its B our a (the file comment).
  const cublasOperation_t op_lt_a = p.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_lt_b = p.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  TIDAL_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_lt_a, sizeof(op_lt_a)));
  TIDAL_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_lt_b, sizeof(op_lt_b)));
  if (p.bias) {
    // The bias runs along cuBLASLt's rows (D is our c transposed): one value per column of our c.
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    TIDAL_CUBLAS_CALL(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    TIDAL_CUBLAS_CALL(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &p.c_type,
                                                     sizeof(p.c_type)));
  }
  plan.layout_a = row_major_layout(p.a_type, p.trans_a ? p.k : p.m, p.trans_a ? p.m : p.k, p.batch);
  plan.layout_b = row_major_layout(p.b_type, p.trans_b ? p.n : p.k, p.trans_b ? p.k : p.n, p.batch);
  plan.layout_c = row_major_layout(p.c_type, p.m, p.n, p.batch);

  cublasLtMatmulPreference_t pref = nullptr;
  TIDAL_CUBLAS_CALL(cublasLtMatmulPreferenceCreate(&pref));
  const std::uint64_t workspace_bytes = kWorkspaceBytes;
  TIDAL_CUBLAS_CALL(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &workspace_bytes, sizeof(workspace_bytes)));
  set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, key.align_b);
  set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, key.align_a);
  set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, key.align_c);
  set_preference(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, key.align_c);

  // Several candidates, best first; the first that cuBLASLt says can run is taken. First pass: no
  // split-K at all, or split-K with fp32 partials reduced in a separate fixed-order pass (the
  // in-place scheme adds partials in the output type, a second rounding for 16-bit c). Should no
  // algorithm qualify, a second pass lifts that filter rather than fail the shape.
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t results[kCandidates]{};
  int found = 0;
  cublasStatus_t status = CUBLAS_STATUS_NOT_SUPPORTED;
  const cublasLtMatmulHeuristicResult_t* picked = nullptr;
  for (const std::uint32_t schemes : {std::uint32_t(CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE),
                                      std::uint32_t(CUBLASLT_REDUCTION_SCHEME_MASK)}) {
    set_preference(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, schemes);
    status = cublasLtMatmulAlgoGetHeuristic(handle(), plan.desc, plan.layout_b, plan.layout_a, plan.layout_c,
                                            plan.layout_c, pref, kCandidates, results, &found);
    for (int i = 0; status == CUBLAS_STATUS_SUCCESS && i < found && picked == nullptr; ++i)
      if (results[i].state == CUBLAS_STATUS_SUCCESS) picked = &results[i];
    if (picked != nullptr) break;
  }
  TIDAL_CUBLAS_CALL(cublasLtMatmulPreferenceDestroy(pref));
  if (picked == nullptr && p.bias) {
    plan.runs = false;
    return plan;
  }
  TIDAL_CHECK(picked != nullptr,
              "cuBLASLt has no algorithm for gemm batch {} m {} n {} k {} (trans {} {}, types {} {}, compute {}, "
              "alignments {} {} {}): {}",
              p.batch, p.m, p.n, p.k, p.trans_a, p.trans_b, int(p.a_type), int(p.c_type), int(p.compute),
              key.align_a, key.align_b, key.align_c,
              status != CUBLAS_STATUS_SUCCESS ? cublasLtGetStatusString(status) : "every candidate was refused");
  plan.algo = picked->algo;
  return plan;
}

// Plans are never erased, so a reference stays valid after the lock is released (std::map nodes
// do not move). Descriptors are only read by cublasLtMatmul, so concurrent callers may share them.
const Plan& plan_for(const PlanKey& key) {
  static std::mutex mutex;
  static std::map<PlanKey, Plan> plans;
  std::lock_guard lock(mutex);
  auto it = plans.find(key);
  if (it == plans.end()) it = plans.emplace(key, make_plan(key)).first;
  return it->second;
}

}  // namespace

bool lt_matmul(const MatmulProblem& p, const void* a, const void* b, void* c, float alpha, float beta,
               const void* bias, const float* a_scale, const float* b_scale) {
  TIDAL_ASSERT(p.batch >= 1 && p.m >= 1 && p.n >= 1 && p.k >= 1, "lt_matmul batch {} m {} n {} k {}", p.batch, p.m,
               p.n, p.k);
  TIDAL_ASSERT(p.bias == (bias != nullptr), "lt_matmul: a bias pointer exactly when the problem has a bias");
  TIDAL_ASSERT(p.scaled == (a_scale != nullptr && b_scale != nullptr) && (a_scale == nullptr) == (b_scale == nullptr),
               "lt_matmul: scale pointers exactly when the problem is scaled");
  TIDAL_CHECK(p.batch <= INT_MAX, "gemm batch {} is over cuBLASLt's limit of {}", p.batch, INT_MAX);
  const Plan& plan = plan_for(PlanKey{p, alignment_of(a), alignment_of(b), alignment_of(c)});
  if (!plan.runs) return false;
  // The bias and scale pointers are attributes of the shared descriptor: set and used under one
  // lock (the call only queues the work, so the lock is held briefly). cuBLASLt's A is our b.
  static std::mutex pointer_mutex;
  std::unique_lock<std::mutex> lock(pointer_mutex, std::defer_lock);
  if (p.bias || p.scaled) lock.lock();
  if (p.bias)
    TIDAL_CUBLAS_CALL(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  if (p.scaled) {
    TIDAL_CUBLAS_CALL(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &b_scale, sizeof(b_scale)));
    TIDAL_CUBLAS_CALL(
        cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &a_scale, sizeof(a_scale)));
  }
  // C and D are one buffer with one layout (cuBLASLt's in-place form); with beta == 0 C is not read.
  TIDAL_CUBLAS_CALL(cublasLtMatmul(handle(), plan.desc, &alpha, b, plan.layout_b, a, plan.layout_a, &beta, c,
                                   plan.layout_c, c, plan.layout_c, &plan.algo, workspace(), kWorkspaceBytes,
                                   tidal::cuda::compute_stream()));
  return true;
}

}  // namespace tidal::ops::cuda
