#include "parallel/topology.hpp"

#include <string>

#include "core/error.hpp"

namespace avtrain::parallel {

Topology Topology::of(int world, int rank, int pp, int dp, int cp) {
  require(pp >= 1, "option parallel.pp = " + std::to_string(pp) + ": must be >= 1");
  require(dp >= 0, "option parallel.dp = " + std::to_string(dp) + ": must be >= 0 (0 infers it from the world size)");
  require(cp >= 1, "option parallel.cp = " + std::to_string(cp) + ": must be >= 1");
  if (dp == 0) {
    require(world % (pp * cp) == 0, "parallel.pp x parallel.cp = " + std::to_string(pp) + " x " + std::to_string(cp) +
                                        " does not divide the " + std::to_string(world) +
                                        " ranks started, so parallel.dp cannot be inferred");
    dp = world / (pp * cp);
  }
  require(world == pp * dp * cp, "parallel.pp x parallel.dp x parallel.cp = " + std::to_string(pp) + " x " +
                                     std::to_string(dp) + " x " + std::to_string(cp) + " = " +
                                     std::to_string(pp * dp * cp) + " ranks, but " + std::to_string(world) +
                                     " were started");
  Topology t;
  t.world = world;
  t.rank = rank;
  t.pp = pp;
  t.dp = dp;
  t.cp = cp;
  return t.at(rank);
}

Topology Topology::at(int r) const {
  Topology t = *this;
  t.rank = r;
  t.pp_rank = r / (dp * cp);
  t.dp_rank = r / cp % dp;
  t.cp_rank = r % cp;
  return t;
}

}  // namespace avtrain::parallel
