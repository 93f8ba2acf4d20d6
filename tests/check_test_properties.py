#!/usr/bin/python3
"""The suite's tests judge by their exit code: no test may pass on its output alone.

CTest's PASS_REGULAR_EXPRESSION makes a test pass when its output matches, whatever its exit code
(a run that prints the line and then crashes passes); WILL_FAIL turns any failure, a crash
included, into a pass. Neither is used here: a command that must print something runs under
tests/e2e/expect_output.py (exit 0 and the pattern), one that must fail under expect_failure.py
(a non-zero exit and its one error line). This reads the build's test list
(`ctest --show-only=json-v1`) and names every test that sets either property.

usage: check_test_properties.py BUILD_DIR
"""
import json
import subprocess
import sys

REFUSED = {"PASS_REGULAR_EXPRESSION": "passes on its output whatever its exit code (use tests/e2e/expect_output.py)",
           "WILL_FAIL": "passes on any failure, a crash included (use tests/e2e/expect_failure.py)"}


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    listing = subprocess.run(["ctest", "--test-dir", sys.argv[1], "--show-only=json-v1"], capture_output=True,
                             text=True, check=True).stdout
    tests = json.loads(listing)["tests"]
    found = [f"{t['name']}: {p['name']} {REFUSED[p['name']]}" for t in tests for p in t.get("properties", [])
             if p["name"] in REFUSED and p["value"] not in (False, "OFF", "FALSE", "0")]
    if found:
        sys.exit("check_test_properties: " + "\n".join(found))
    print(f"check_test_properties: none of the {len(tests)} tests passes on its output alone or on failure")


if __name__ == "__main__":
    main()
