#pragma once
// Rank 0's own exit code, for a job script: a launcher may not pass it on (mpirun sent SIGTERM
// itself exits 1 whatever its ranks did; srun exits 0 when it could not launch them; mpirun whose
// daemon on another node went silent exits 255, or waits for it). Rank 0 writes the code it ends
// with to $AVTRAIN_EXIT_STATUS_FILE (jobscripts/slurm-avtrain.sbatch reads it); no file means rank 0
// never got that far.
namespace avtrain {

// Writes `code` to $AVTRAIN_EXIT_STATUS_FILE when set and `rank` is 0; a failure to write is printed.
void record_exit_status(int code, int rank);

}  // namespace avtrain
