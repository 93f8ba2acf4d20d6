#include "train/run_config.hpp"

namespace avtrain {

DistributedOptimizerConfig distributed_optimizer_config(const RunConfig& c) {
  DistributedOptimizerConfig d;
  d.optim = c.optim;
  d.zero = c.parallel.zero;
  d.bucket_mb = c.parallel.grad_bucket_mb;
  d.wire = c.parallel.grad_comm_dtype;
  d.seed = c.train.seed;
  d.init_ulps = c.train.init_ulps;
  d.masters = c.precision.master_weights == MasterWeights::fp32;
  d.rounding = c.precision.weight_rounding;
  d.sample_parts = c.parallel.cp;
  return d;
}

}  // namespace avtrain
