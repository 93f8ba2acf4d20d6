#!/usr/bin/env bash
# mpirun on this machine: N ranks of avtrain, allowed as root, oversubscribed when ranks exceed
# cores, and not bound to one core each (avtrain runs its own threads per rank).
#   jobscripts/mpirun-local.sh N PROGRAM [ARGS...]
set -euo pipefail
ranks=${1:?usage: mpirun-local.sh N PROGRAM [ARGS...]}
shift
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Containers often forbid the cross-process memory copy (CMA) that shared-memory transfers try first.
export OMPI_MCA_btl_vader_single_copy_mechanism=${OMPI_MCA_btl_vader_single_copy_mechanism:-none}
exec mpirun -n "$ranks" --bind-to none "$@"
