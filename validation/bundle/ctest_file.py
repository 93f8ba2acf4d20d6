#!/usr/bin/python3
"""Turns the build tree's gpu tests into a CTestTestfile.cmake that runs from wherever the bundle is
unpacked (`ctest --test-dir BUNDLE/tests -L gpu`).

usage: ctest_file.py TESTS_JSON BUILD_DIR SOURCE_DIR MPIEXEC OUT_FILE

TESTS_JSON is `ctest -L gpu --show-only=json-v1` of the cuda build. Paths are rewritten to the
bundle's: BUILD_DIR/bin/NAME -> BUNDLE/bin/NAME (the launcher), MPIEXEC -> BUNDLE/bin/mpirun,
SOURCE_DIR -> BUNDLE/share/avtrain (the scripts and decks the bundle carries), every other path
under BUILD_DIR -> BUNDLE/tests/work, and /usr/bin/python3 -> the node's python3 ($AVTRAIN_PYTHON,
else python3 on PATH). Prints the programs of BUILD_DIR/bin that the tests start, one a line, so
the bundle carries exactly those.
"""
import json
import os
import sys

# What runs a test and what decides its verdict: every property of the kind is carried, so a test
# of the bundle passes and fails as it does in the build tree.
KEPT_PROPERTIES = ("LABELS", "TIMEOUT", "PROCESSORS", "ENVIRONMENT", "RUN_SERIAL", "SKIP_RETURN_CODE",
                   "SKIP_REGULAR_EXPRESSION", "PASS_REGULAR_EXPRESSION", "FAIL_REGULAR_EXPRESSION", "WILL_FAIL")


def bracket(text):
    """A CMake bracket argument cannot end early: pick a level of '=' the text does not contain."""
    level = "="
    while f"]{level}]" in text:
        level += "="
    return f"[{level}[{text}]{level}]"


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    tests_json, build, source, mpiexec, out_file = sys.argv[1:]
    build, source = os.path.realpath(build), os.path.realpath(source)
    bin_dir = os.path.join(build, "bin")
    tests = json.load(open(tests_json))["tests"]
    if not tests:
        sys.exit(f"ctest_file.py: {tests_json} lists no gpu test")
    programs = set()

    def relocate(arg):
        if arg == mpiexec:
            return "${bundle}/bin/mpirun"
        if arg == "/usr/bin/python3":
            return "${python}"
        if arg.startswith(bin_dir + "/"):
            programs.add(arg[len(bin_dir) + 1:])
            return "${bundle}/bin/" + arg[len(bin_dir) + 1:]
        if arg == bin_dir:
            return "${bundle}/bin"
        if arg == build or arg.startswith(build + "/"):
            return "${work}" + arg[len(build):]
        if arg == source or arg.startswith(source + "/"):
            return "${source}" + arg[len(source):]
        if os.path.isabs(arg):
            sys.exit(f"ctest_file.py: test argument {arg} is a path the bundle cannot relocate")
        return arg

    lines = [
        "# Made by validation/gpu-bundle.sh from the cuda build's gpu tests; paths are the bundle's own.",
        "# ctest reads this file in its own folder, leaving CMAKE_CURRENT_LIST_DIR empty and giving the",
        "# file's bare name; CMake 4 resolves \".\" against an empty base too, but the file's name against",
        "# the working folder (checked from 3.25 to 4.4: tests/... bundle_test_file_keeps_every_verdict).",
        "if(CMAKE_CURRENT_LIST_DIR)",
        '  set(tests "${CMAKE_CURRENT_LIST_DIR}")',
        "elseif(CMAKE_VERSION VERSION_LESS 3.19)  # no file(REAL_PATH) before 3.19 (Debian 11's ctest: 3.18)",
        '  get_filename_component(this_file "${CMAKE_CURRENT_LIST_FILE}" REALPATH)',
        '  get_filename_component(tests "${this_file}" DIRECTORY)',
        "else()",
        '  file(REAL_PATH "${CMAKE_CURRENT_LIST_FILE}" this_file)',
        '  get_filename_component(tests "${this_file}" DIRECTORY)',
        "endif()",
        'get_filename_component(bundle "${tests}/.." ABSOLUTE)',
        'set(source "${bundle}/share/avtrain")',
        'set(work "${tests}/work")',
        'set(python "$ENV{AVTRAIN_PYTHON}")',
        'if(NOT python)',
        '  set(python python3)',
        'endif()',
    ]
    made = set()
    for test in tests:
        name = test["name"]
        command = " ".join(f'"{relocate(a)}"' for a in test["command"])
        lines.append(f"add_test({bracket(name)} {command})")
        properties = {p["name"]: p["value"] for p in test.get("properties", [])}
        workdir = relocate(properties.get("WORKING_DIRECTORY", build))
        if workdir not in made:
            lines.append(f'file(MAKE_DIRECTORY "{workdir}")')
            made.add(workdir)
        settings = [f'WORKING_DIRECTORY "{workdir}"']
        for key in KEPT_PROPERTIES:
            if key in properties:
                value = properties[key]
                if isinstance(value, bool):
                    value = "ON" if value else "OFF"
                elif isinstance(value, list):
                    value = ";".join(value)
                settings.append(f"{key} {bracket(str(value))}")
        lines.append(f"set_tests_properties({bracket(name)} PROPERTIES {' '.join(settings)})")
    with open(out_file, "w") as f:
        f.write("\n".join(lines) + "\n")
    for program in sorted(programs):
        print(program)


if __name__ == "__main__":
    main()
