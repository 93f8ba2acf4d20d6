#!/usr/bin/env bash
# The README's two commands on a machine that has none of the project's packages, in the order a new
# user runs them: a Debian 12 minbase root (debootstrap: apt, bash, coreutils, no compiler, no
# python) with this machine's apt sources and a clean clone of the committed HEAD, inside which
#   1. bash jobscripts/quickstart.sh   (the run command, first) must exit 0 and end with the
#      verdict and the line that says where to look; before it the root is checked to hold none of
#      the packages jobscripts/install-deps.sh lists (python3-matplotlib, python3-h5py, g++, ...);
#   2. bash jobscripts/test.sh ARGS    (the test command) must exit 0. ARGS are ctest's:
#      AVTRAIN_FRESH_CTEST (default: one test per package group the test command adds) or "all".
# Each run starts from a pristine copy of the root (made once under build/fresh-root.base, ~1 min);
# package downloads are shared with this machine's apt cache. Inside the root: bubblewrap (its own
# mount and PID namespaces: nothing it starts outlives it), root's network, no service started by
# a package (policy-rc.d), a /dev/shm of its own.
#   bash validation/fresh-machine-test.sh                     # CI: about 15 min on 2 cores
#   AVTRAIN_FRESH_CTEST=all bash validation/fresh-machine-test.sh   # the whole suite in the root
#   AVTRAIN_FRESH_CTEST=e2e_slurm_job_survives_its_time_limit AVTRAIN_FRESH_REPEAT=10 \
#     bash validation/fresh-machine-test.sh        # one test 10 times in a row (ctest --repeat until-fail)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
base=$root/build/fresh-root.base
fresh=$root/build/fresh-root
log=$root/build/fresh-machine.log
say() { echo "fresh-machine-test: $*"; }
die() { echo "fresh-machine-test: FAILED: $*" >&2; exit 1; }
# One test of each kind the test command needs beyond the run command's packages: PyTorch
# (reference), h5py (shards written by another writer), FFmpeg (pack), espeak-ng and the fonts
# (the media demo's tools: the demo itself, minutes long, runs in the suite), MPI across ranks, a real Slurm, python3-venv (a CMake 4 from PyPI), and the
# suite's process check. (The namespace nodes' tests skip without OpenSSH: none of them here. The README's
# recipe needs nothing the pack tests do not: FFmpeg's libraries and program, run on the whole suite.) The
# fuzz preset's packages (clang, libFuzzer: its configure step) and python3-hypothesis (the reconcile tool fuzzed).
default_tests='^(e2e_train_ci|bundle_cmake4_from_pypi|e2e_rewrite_shards_with_h5py|e2e_train_on_h5py_shards|reference_dump|reference_matches_pytorch|pack_make_media|pack_on_one_rank|pack_checks_what_comes_out|media_demo_tools_make_word_clips|fuzz_preset_configures_with_the_installed_packages|val_reconcile_fuzzed_never_tracebacks|mpi_run_pp2_dp2|e2e_slurm_job_survives_its_time_limit|no_process_outlives_the_suite)$'
tests=${AVTRAIN_FRESH_CTEST:-}
ctest_args=(-R "$default_tests")
[[ $tests == all ]] && ctest_args=(-LE fresh)  # the whole suite but this test itself
[[ -n $tests && $tests != all ]] && ctest_args=(-R "$tests")
repeat=${AVTRAIN_FRESH_REPEAT:-1}
[[ $repeat =~ ^[1-9][0-9]*$ ]] || die "AVTRAIN_FRESH_REPEAT=$repeat: not a count of runs"
(( repeat > 1 )) && ctest_args+=(--repeat "until-fail:$repeat")
[[ $(id -u) -eq 0 ]] || die "needs root (debootstrap, apt inside the root)"
for tool in debootstrap bwrap git; do command -v "$tool" > /dev/null || die "$tool is missing (jobscripts/install-deps.sh)"; done
git -C "$root" diff --quiet HEAD -- || say "note: uncommitted changes are not in the clone (HEAD is)"

if [[ ! -f $base/.made ]]; then
  mirror=$(sed -n 's/^URIs: *\([^ ]*\).*/\1/p' /etc/apt/sources.list.d/debian.sources 2> /dev/null | head -1)
  [[ -n $mirror ]] || mirror=$(awk '$1 == "deb" && $3 ~ /^bookworm$/ {print $2; exit}' /etc/apt/sources.list 2> /dev/null)
  [[ -n $mirror ]] || die "no Debian mirror in this machine's apt sources"
  rm -rf "$base" "$base.tmp"
  say "making a Debian 12 minbase root from $mirror"
  debootstrap --variant=minbase bookworm "$base.tmp" "$mirror" > "$root/build/fresh-root.log" 2>&1 ||
    die "debootstrap (log: build/fresh-root.log)"
  touch "$base.tmp/.made"
  mv "$base.tmp" "$base"
fi
rm -rf "$fresh"
cp -a "$base" "$fresh"
rm -f "$fresh/.made" "$fresh/etc/apt/sources.list"
cp -r /etc/apt/sources.list.d/. "$fresh/etc/apt/sources.list.d/" 2> /dev/null || true
[[ -f /etc/apt/sources.list ]] && cp /etc/apt/sources.list "$fresh/etc/apt/sources.list"
cp /etc/resolv.conf /etc/hosts "$fresh/etc/"  # the machine's name and DNS, as a machine of its own has
# The network's trust, as a machine of its own on this network has it: certificate authorities
# added here (a TLS-inspecting egress proxy's, say) and pip's pointer to the bundle; without them
# pip in the root cannot reach PyPI (the CMake 4 test's virtual environment), though apt (http) can.
if [[ -d /usr/local/share/ca-certificates ]]; then
  mkdir -p "$fresh/usr/local/share/ca-certificates" "$fresh/etc/ssl/certs"
  cp -r /usr/local/share/ca-certificates/. "$fresh/usr/local/share/ca-certificates/"
  [[ -f /etc/ssl/certs/ca-certificates.crt ]] && cp /etc/ssl/certs/ca-certificates.crt "$fresh/etc/ssl/certs/"
fi
[[ -f /etc/pip.conf ]] && cp /etc/pip.conf "$fresh/etc/pip.conf"
printf '#!/bin/sh\nexit 101\n' > "$fresh/usr/sbin/policy-rc.d"  # packages start no service in here
chmod +x "$fresh/usr/sbin/policy-rc.d"
git clone -q "$root" "$fresh/root/avtrain"

# None of the project's packages: everything install-deps.sh lists, with every option.
ours=$(bash "$root/jobscripts/install-deps.sh" --list --cuda --tests --reference --demo |
       grep -vxE 'debian-archive-keyring' || true)
[[ -n $ours ]] || die "read no package list from jobscripts/install-deps.sh"
held=()
for p in $ours; do
  if chroot "$fresh" dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q "install ok installed"; then held+=("$p"); fi
done
(( ${#held[@]} == 0 )) || die "the root holds ${held[*]}, of the project's packages"
say "the root holds none of the $(wc -w <<< "$ours") packages jobscripts/install-deps.sh lists"

in_root() {  # in_root: bash script from stdin (its commands must not read stdin), in the clone, as root
  bwrap --bind "$fresh" / --proc /proc --dev /dev --ro-bind /sys /sys --perms 1777 --tmpfs /dev/shm \
        --bind /var/cache/apt/archives /var/cache/apt/archives \
        --unshare-pid --unshare-ipc --die-with-parent --cap-add ALL --chdir /root/avtrain --clearenv \
        --setenv PATH /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin --setenv HOME /root \
        --setenv LANG C.UTF-8 --setenv TERM dumb bash -s
}

: > "$log"
set +e
in_root >> "$log" 2>&1 <<'EOF'
t0=$(date +%s)
bash jobscripts/quickstart.sh < /dev/null > quickstart.log 2>&1
rc=$?
echo "quickstart: exit $rc after $(( $(date +%s) - t0 )) s; its last lines:"
tail -n 2 quickstart.log
EOF
set -e
cat "$log"
grep -q "^quickstart: exit 0 after" "$log" || die "the run command failed (log: $fresh/root/avtrain/quickstart.log)"
tail -n 2 "$log" | head -1 | grep -q "^verdict: PASS" || die "the run command did not end with the verdict"
tail -n 1 "$log" | grep -q "^quickstart: traces in .*; plot .*bf16.band.png$" || die "the run command did not end with where to look (and its plot)"
say "1. the run command installed what it needs, trained, and ended with the verdict and its plot"

set +e
in_root >> "$log" 2>&1 <<EOF
t0=\$(date +%s)
bash jobscripts/test.sh ${ctest_args[*]@Q} < /dev/null > test.log 2>&1
rc=\$?
echo "test: exit \$rc after \$(( \$(date +%s) - t0 )) s; its summary:"
grep -E "tests passed|tests failed|Failed|Not Run" test.log | tail -n 12
EOF
set -e
tail -n +$(( $(grep -n "^quickstart: exit" "$log" | cut -d: -f1) + 3 )) "$log"
grep -q "^test: exit 0 after" "$log" || die "the test command failed (log: $fresh/root/avtrain/test.log)"
say "2. the test command installed what the tests need and passed: $(grep -m1 'tests passed' "$log")"
