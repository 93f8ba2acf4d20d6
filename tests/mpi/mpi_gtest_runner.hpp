#pragma once
// Runs the GoogleTest tests of an MPI test program on every rank (after MPI_Init_thread and
// InitGoogleTest): rank 0 prints gtest's report, other ranks print only their own failures as
// "[rank N] file:line: message", and every rank returns 1 when any rank failed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

namespace avtrain::test {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& result) override {
    if (result.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, result.file_name() ? result.file_name() : "?",
                   result.line_number(), result.message());
  }

 private:
  int rank_;
};

inline int run_tests_on_every_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  int any_failed = failed;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && any_failed && !failed) std::fprintf(stderr, "FAILED on another rank: see the [rank N] lines\n");
  return any_failed;
}

}  // namespace avtrain::test
