#!/usr/bin/env bash
# The GPU bundle's own test file, run by each ctest given (Debian's 3.25, a CMake 4 from PyPI): every
# gpu test of the build must be found and end Passed or Skipped (no GPU here), none "Not Run", under
# each. Catches a test file that only one CMake reads right (under 4.4 a relative folder once made
# every test "Not Run").
#   validation/bundle/bundle-tests-under-ctests.sh BUNDLE BUILD CTEST...   (BUILD: the cuda build it ships)
set -uo pipefail
bundle=${1:?usage: bundle-tests-under-ctests.sh BUNDLE BUILD CTEST...}
build=${2:?usage: bundle-tests-under-ctests.sh BUNDLE BUILD CTEST...}
shift 2
bundle=$(cd "$bundle" && pwd)
build=$(cd "$build" && pwd)
expected=$("$1" --test-dir "$build" -N -L gpu | sed -n 's/^Total Tests: //p')
[[ $expected -gt 0 ]] || { echo "no gpu tests in $build"; exit 1; }
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
failed=0
for ctest in "$@"; do
  ctest=$(realpath "$ctest")
  version=$("$ctest" --version | head -1)
  log=$(mktemp)
  # From another folder, as a user would: the file must find its own.
  (cd / && "$ctest" --test-dir "$bundle/tests" -L gpu) > "$log" 2>&1
  found=$(grep -cE "Test +#[0-9]+: " "$log")
  not_run=$(grep -cE "Not Run|Could not find" "$log")
  if grep -qE "100% tests passed(, 0 tests failed)? out of $expected\$" "$log" && (( found == expected && not_run == 0 )); then
    echo "$version: $expected gpu tests found, $(grep -c '(Skipped)' "$log") skipped, none Not Run: ok"
  else
    failed=1
    echo "$version: FAILED ($found of $expected tests found, $not_run Not Run):"
    tail -25 "$log"
  fi
  rm -f "$log"
done
exit $failed
