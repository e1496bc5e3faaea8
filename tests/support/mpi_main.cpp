// Main of the multi-rank tests (launched with mpirun): MPI up, then GoogleTest. Only rank 0
// prints the usual report; other ranks print their failures, prefixed with their rank.
#include "core/blas_kernels.h"
#include "support/mpi.h"

#include <gtest/gtest.h>
#include <fmt/format.h>

namespace tidal::testing {
namespace {

comm::MpiRuntime* g_runtime = nullptr;

class FailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit FailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed()) fmt::print(stderr, "[rank {}] {}:{}: {}\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

comm::MpiRuntime& mpi() { return *g_runtime; }

}  // namespace tidal::testing

int main(int argc, char** argv) {
  tidal::select_blas_kernels(argv);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = 0;
  {
    tidal::comm::MpiRuntime runtime(&argc, &argv);
    tidal::testing::g_runtime = &runtime;
    if (runtime.world_rank() != 0) {
      auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
      delete listeners.Release(listeners.default_result_printer());
      listeners.Append(new tidal::testing::FailurePrinter(runtime.world_rank()));
    }
    rc = RUN_ALL_TESTS();
    tidal::testing::g_runtime = nullptr;
  }
  return rc;
}
