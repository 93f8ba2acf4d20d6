#!/usr/bin/python3
"""The bundle's test file keeps what decides a verdict: ctest_file.py on a made-up gpu test list
whose tests depend on PASS_/FAIL_/SKIP_REGULAR_EXPRESSION, WILL_FAIL and SKIP_RETURN_CODE, then
`ctest --test-dir BUNDLE/tests` on the file it wrote, from another folder, with each CTEST given
(default: ctest on PATH): each test must pass, fail or be skipped as the properties say (dropped,
every one of them would end otherwise), and the file must find its own folder under each CMake
(under CMake 4 a file that did not ran no test: "Not Run").

usage: test_ctest_file.py WORK_DIR [CTEST ...]
"""
import json
import os
import re
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# name, (text printed, exit code), properties, the verdict ctest must give
CASES = [
    ("pass_expression_matches", ("all ok", 0), {"PASS_REGULAR_EXPRESSION": ["all ok"]}, "Passed"),
    ("pass_expression_misses", ("not it", 0), {"PASS_REGULAR_EXPRESSION": ["all ok"]}, "Failed"),
    ("will_fail", ("broken", 1), {"WILL_FAIL": True}, "Passed"),
    ("fail_expression", ("ERROR here", 0), {"FAIL_REGULAR_EXPRESSION": ["ERROR"]}, "Failed"),
    ("skip_return_code", ("no device", 77), {"SKIP_RETURN_CODE": 77}, "Skipped"),
    ("skip_expression", ("no GPU visible", 0), {"SKIP_REGULAR_EXPRESSION": ["no GPU visible"]}, "Skipped"),
    ("plain_failure", ("crashed", 3), {}, "Failed"),
]


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    work = os.path.abspath(sys.argv[1])
    ctests = sys.argv[2:] or ["ctest"]
    shutil.rmtree(work, ignore_errors=True)
    build, source, bundle = (os.path.join(work, d) for d in ("build", "source", "bundle"))
    for d in (os.path.join(build, "bin"), source, os.path.join(bundle, "bin"), os.path.join(bundle, "tests")):
        os.makedirs(d)
    say = os.path.join(build, "bin", "say")
    with open(say, "w") as f:
        f.write('#!/bin/sh\necho "$1"\nexit "$2"\n')
    os.chmod(say, 0o755)
    tests = [{"name": name, "command": [say, text, str(code)],
              "properties": [{"name": "LABELS", "value": ["gpu"]}] +
                            [{"name": k, "value": v} for k, v in props.items()]}
             for name, (text, code), props, _ in CASES]
    listing = os.path.join(work, "tests.json")
    with open(listing, "w") as f:
        json.dump({"kind": "ctestInfo", "version": {"major": 1, "minor": 0}, "tests": tests}, f)
    made = subprocess.run([sys.executable, os.path.join(HERE, "ctest_file.py"), listing, build, source,
                           "/usr/bin/mpiexec", os.path.join(bundle, "tests", "CTestTestfile.cmake")],
                          capture_output=True, text=True)
    if made.returncode or made.stdout.split() != ["say"]:
        sys.exit(f"test_ctest_file: ctest_file.py exit {made.returncode}, programs {made.stdout.split()}:\n{made.stderr}")
    shutil.copy(say, os.path.join(bundle, "bin", "say"))
    for ctest in ctests:
        version = subprocess.run([ctest, "--version"], capture_output=True, text=True).stdout.split("\n")[0]
        run = subprocess.run([ctest, "--test-dir", os.path.join(bundle, "tests")], capture_output=True, text=True,
                             cwd="/")
        got = {m.group(1): m.group(2)
               for m in re.finditer(r"Test +#\d+: (\S+) \.+\s*\**(Passed|Failed|Skipped|Not Run)", run.stdout)}
        wrong = [f"{name}: {got.get(name, 'not run')}, expected {want}" for name, _, _, want in CASES
                 if got.get(name) != want]
        if wrong:
            sys.exit(f"test_ctest_file: under {version} ({ctest}) the bundle's tests do not keep their verdicts:\n  "
                     + "\n  ".join(wrong) + f"\nctest said:\n{run.stdout}{run.stderr}")
        print(f"test_ctest_file: {version}: {len(CASES)} tests of the bundle's file pass, fail and skip as in the "
              f"build tree")


if __name__ == "__main__":
    main()
