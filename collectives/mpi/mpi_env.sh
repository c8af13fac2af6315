# Sourced by the mpirun test wrappers: mpirun flags and OpenMPI settings for this container.
export OMPI_MCA_btl=self,vader
export OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_pml=ob1
export OMPI_MCA_rmaps_base_oversubscribe=1
# Short session-directory paths (Unix socket names are limited to 108 bytes).
export TMPDIR=/tmp
export HOME="${HOME:-/tmp}"
MPIRUN_FLAGS=(--oversubscribe --bind-to none)
if [[ "$(id -u)" -eq 0 ]]; then
  MPIRUN_FLAGS+=(--allow-run-as-root)
fi
# Under --config=asan: OpenMPI's own start-up allocations are never freed and would fail every run
# in LeakSanitizer; leak checking of meshflow code is done by the in-process tests.
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
