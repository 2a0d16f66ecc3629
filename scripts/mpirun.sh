#!/usr/bin/env bash
# mpirun with the flags OpenMPI needs on a small shared machine (docs/distributed.md):
#   --oversubscribe            more ranks than cores (4 ranks on 2 cores in the tests)
#   --bind-to none             ranks may share cores; binding each to one would serialise them
#   btl self,vader             the shared-memory transport only (one machine: no TCP, no InfiniBand probing)
#   btl_vader_single_copy_mechanism none: containers often forbid the cross-memory-attach syscalls
#   mpi_yield_when_idle        1 when there are more ranks than cores (a rank waiting in a collective yields its
#                              core to the rank it waits for), else 0 (polling answers a collective sooner)
#   OMPI_ALLOW_RUN_AS_ROOT*    OpenMPI refuses root otherwise (CI and containers run as root)
#   orte_base_help_aggregate 0 each rank prints its own help text (the aggregation logs spurious ORTE errors on abort)
#   scripts/mpirun.sh -np 2 myriad train --config configs/tiny.json --dp 2 --out runs/dp2
set -euo pipefail
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
ranks=1
args=("$@")
for ((i = 0; i < ${#args[@]} - 1; ++i)); do
  case "${args[i]}" in -np | -n) ranks="${args[i + 1]}" ;; esac
done
if [[ "$ranks" =~ ^[0-9]+$ ]] && ((ranks > $(nproc))); then
  export OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-1}"
else
  export OMPI_MCA_mpi_yield_when_idle="${OMPI_MCA_mpi_yield_when_idle:-0}"
fi
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_orte_base_help_aggregate=0
exec mpirun --oversubscribe --bind-to none "$@"
