#!/usr/bin/python3
"""Where a fuzz finding happened: reads the report of a finding's replay (AddressSanitizer, UBSan,
LeakSanitizer or libFuzzer's timeout and out-of-memory reports, symbolized) on stdin and prints one line:

    avtrain FILE:LINE FUNCTION | SUMMARY       the first frame of the stack that is avtrain's own code
    library MODULE FUNCTION | SUMMARY          the first such frame is in a shared library (libhdf5, libav*)
    unknown | SUMMARY                          no stack in the report

Frames of the sanitizers' and libFuzzer's runtime, of the C and C++ runtime libraries and of the C++
standard headers are passed over: they are where a finding shows, not where it is. validation/fuzz-campaign.sh
counts a library's findings apart from avtrain's (docs/fuzzing.md, "Findings in libraries").
"""
import re
import sys

FRAME = re.compile(r"^\s*#(\d+) 0x[0-9a-f]+ +(?:in )?(.+?)(?: \(BuildId: [0-9a-f]+\))?$")
RUNTIME_FUNCTIONS = ("__interceptor_", "__asan", "__sanitizer", "__ubsan", "__lsan", "__cxa_", "__cxxabi",
                     "fuzzer::", "operator new", "operator delete", "malloc", "calloc", "realloc", "free",
                     "abort", "raise", "__GI_", "__libc_", "__pthread", "pthread_", "_start", "std::terminate",
                     "__gnu_cxx::__verbose_terminate_handler", "__clang_call_terminate")
RUNTIME_PLACES = ("libc.so", "libstdc++.so", "libgcc_s.so", "libm.so", "ld-linux", "csu/", "sysdeps/",
                  "/include/c++/", "/bits/", "nptl/", "stdlib/", "signal/")


def frames(report):
    """The first stack of the report: (function, place) from frame #0 on."""
    stack = []
    for line in report.splitlines():
        m = FRAME.match(line)
        if not m:
            if stack:
                break
            continue
        if int(m.group(1)) == 0 and stack:
            break
        text = m.group(2)
        # "FUNC FILE:LINE:COL" or "FUNC (MODULE+0xOFF)"
        place = re.search(r"(?:^| )\(([^()]+)\+0x[0-9a-f]+\)$", text)
        if place:
            stack.append((text[:place.start()], place.group(1)))
        else:
            parts = text.rsplit(" ", 1)
            stack.append((parts[0], parts[1] if len(parts) == 2 else ""))
    return stack


def origin(report):
    summary = next((line.strip() for line in report.splitlines() if line.startswith("SUMMARY:")), "")
    if not summary:
        summary = next((line.strip() for line in report.splitlines() if "ERROR:" in line or "runtime error:" in line), "")
    for function, place in frames(report):
        if function.startswith(RUNTIME_FUNCTIONS) or any(p in place for p in RUNTIME_PLACES):
            continue
        if place.startswith("/") and ":" not in place and not re.search(r"\.so(\.|$)", place):
            continue  # the fuzz program itself, without a source line: the sanitizers' interceptors (strdup, memcpy)
        if re.search(r"\.so(\.|$)", place):
            module = re.sub(r"\.so.*$", "", place.rsplit("/", 1)[-1])
            return f"library {module} {function or '?'} | {summary}"
        return f"avtrain {place} {function} | {summary}"
    return f"unknown | {summary}"


if __name__ == "__main__":
    print(origin(sys.stdin.read()))
