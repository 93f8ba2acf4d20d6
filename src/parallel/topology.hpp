#pragma once
// Where a rank sits in the pp x dp x cp grid. Pipeline outermost, context parallelism innermost, as
// Megatron orders them:
//   rank = pp_rank * (dp * cp) + dp_rank * cp + cp_rank
// so the cp ranks of one replica are neighbours (they exchange activations at every attention),
// then the dp replicas of one stage (one node, when dp x cp divides the ranks per node), and a
// replica's stages are dp x cp ranks apart. The cp ranks of a replica read the same micro-batches;
// for everything else (gradients, ZeRO parts, statistics) they count as more replicas of the stage.
namespace avtrain::parallel {

struct Topology {
  int world = 1, rank = 0;
  int pp = 1, dp = 1, cp = 1;
  int pp_rank = 0, dp_rank = 0, cp_rank = 0;
  int local_rank = 0, local_size = 1;  // among the ranks of this node (shared-memory split)

  // dp = 0 infers it from the world size (world / (pp x cp)). Throws Error when world != pp x dp x cp.
  static Topology of(int world, int rank, int pp, int dp, int cp = 1);
  // The rank of context part `part` of replica `replica` in stage `stage`.
  int rank_of(int stage, int replica, int part = 0) const { return (stage * dp + replica) * cp + part; }
  // This rank's pipeline peer in stage `stage`: the rank with its dp_rank and cp_rank there.
  int in_stage(int stage) const { return rank_of(stage, dp_rank, cp_rank); }
  // The ranks of this rank's stage (its data-parallel group): dp x cp of them, this one's place.
  int stage_rank() const { return dp_rank * cp + cp_rank; }
  int stage_size() const { return dp * cp; }
  bool first_stage() const { return pp_rank == 0; }
  bool last_stage() const { return pp_rank == pp - 1; }
  // The same grid seen from rank r (its pp_rank, dp_rank, cp_rank; local_* as this rank's).
  Topology at(int r) const;
};

}  // namespace avtrain::parallel
