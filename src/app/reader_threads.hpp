#pragma once
// data.reader_threads when the deck and the command line leave it out (docs/data-reader.md).

namespace avtrain {

// The cores this rank may use (its CPU affinity set; when that is the whole machine and the launcher
// says how many ranks share the node, OMPI_COMM_WORLD_LOCAL_SIZE / MPI_LOCALNRANKS /
// SLURM_NTASKS_PER_NODE, an equal share of it), minus the compute threads (train.threads) on a CPU
// run; at least 1.
int default_reader_threads(bool cpu_run, int compute_threads);

}  // namespace avtrain
