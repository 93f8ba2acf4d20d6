#include "parallel/topology.hpp"

#include <string>

#include "core/error.hpp"

namespace avtrain::parallel {

Topology Topology::of(int world, int rank, int pp, int dp) {
  require(pp >= 1, "option parallel.pp = " + std::to_string(pp) + ": must be >= 1");
  require(dp >= 0, "option parallel.dp = " + std::to_string(dp) + ": must be >= 0 (0 infers it from the world size)");
  if (dp == 0) {
    require(world % pp == 0, "parallel.pp = " + std::to_string(pp) + " does not divide the " + std::to_string(world) +
                                 " ranks started, so parallel.dp cannot be inferred");
    dp = world / pp;
  }
  require(world == pp * dp, "parallel.pp x parallel.dp = " + std::to_string(pp) + " x " + std::to_string(dp) + " = " +
                                std::to_string(pp * dp) + " ranks, but " + std::to_string(world) + " were started");
  Topology t;
  t.world = world;
  t.rank = rank;
  t.pp = pp;
  t.dp = dp;
  t.pp_rank = rank / dp;
  t.dp_rank = rank % dp;
  return t;
}

}  // namespace avtrain::parallel
