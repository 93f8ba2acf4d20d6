#pragma once
// The [parallel] section of a deck: the pp x dp x cp layout, the pipeline schedule and cut, and the
// gradient all-reduce (or, under ZeRO, reduce-scatter).
#include <string>

#include "core/dtype.hpp"
#include "parallel/pipeline_schedule.hpp"

namespace avtrain {

struct ParallelConfig {
  int pp = 1;                          // pipeline stages
  int dp = 0;                          // data-parallel replicas; 0: world size / (pp x cp)
  int cp = 1;                          // context-parallel ranks: each sample's tokens cut over cp ranks
  parallel::Schedule schedule = parallel::Schedule::one_f_one_b;  // gpipe | 1f1b
  std::string partition = "params";    // params | uniform | first layers of stages 1.. ("blocks.2")
  double grad_bucket_mb = 25;          // gradient all-reduce bucket size (fp32 MiB)
  DType grad_comm_dtype = DType::f32;  // fp32 | fp16 | bf16: the gradient all-reduce's wire type
  int zero = 0;                        // 1: ZeRO stage 1, the optimizer state split over the replicas
  std::string timeline;                // Chrome-trace JSON of the run's spans; empty writes none
};

}  // namespace avtrain
