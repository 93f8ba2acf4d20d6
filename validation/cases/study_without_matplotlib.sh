#!/usr/bin/env bash
# A machine without matplotlib: reconcile-study.sh (the quickstart's judge) must still give its
# verdicts and exit 0, with a one-line note in place of each plot and no plot file left behind.
#   study_without_matplotlib.sh STUDY_ARGS...   (reconcile-study.sh's arguments; --reuse to skip training)
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log=$(mktemp)
trap 'rm -f "$log"' EXIT
PYTHONPATH=$here/no_matplotlib bash "$here/../reconcile-study.sh" "$@" > "$log" 2>&1
rc=$?
cat "$log"
fail() { echo "study_without_matplotlib: $*"; exit 1; }
(( rc == 0 )) || fail "reconcile-study.sh exited $rc"
grep -q "note: no plot .*band.png: plot_traces.py: cannot plot without matplotlib" "$log" || fail "no note in place of the plot"
grep -q "Traceback" "$log" && fail "a traceback"
out=$(sed -n 's/^reconcile-study.sh: seed [0-9]* -> \(.*\)$/\1/p' "$log" | head -n 1)
[[ -n $out ]] || fail "no seed directory in the output"
ls "$out"/*.band.png > /dev/null 2>&1 && fail "a plot file was left in $out"
grep -q "verdict: PASS" "$out"/*.band.txt || fail "no verdict in $out"
echo "study_without_matplotlib: verdicts given, each plot replaced by a note; ok"
