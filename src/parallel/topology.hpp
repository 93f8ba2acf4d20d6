#pragma once
// Where a rank sits in the pp x dp grid. Pipeline outermost, as Megatron orders it:
//   rank = pp_rank * dp + dp_rank
// so the dp ranks of one stage are neighbours (one node, when dp divides the ranks per node) and
// a replica's stages are dp ranks apart.
namespace avtrain::parallel {

struct Topology {
  int world = 1, rank = 0;
  int pp = 1, dp = 1;
  int pp_rank = 0, dp_rank = 0;
  int local_rank = 0, local_size = 1;  // among the ranks of this node (shared-memory split)

  // dp = 0 infers it from the world size. Throws Error when world != pp x dp.
  static Topology of(int world, int rank, int pp, int dp);
  int rank_of(int stage, int replica) const { return stage * dp + replica; }
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp - 1; }
};

}  // namespace avtrain::parallel
