#!/usr/bin/env python3
"""Every file the GPU bundle redistributes has its license text (validation/bundle/licenses.sh).

share/licenses/README names, line by line, a file or folder (ending in /) of the bundle and the
folders under share/licenses that hold its licenses. Fails when a file of the bundle is named by no
line (a program, library or plugin, being ELF, must be named by its own line, not by its folder's),
when a line names a license folder that is missing or holds no text, or a file the bundle lacks.

    check_licenses.py BUNDLE        e.g. build/avtrain-bundle
    check_licenses.py --self-test   a made-up bundle: passes whole, fails with each fault put in
"""
import os
import subprocess
import sys
import tempfile

MANIFEST = "share/licenses/README"


def read_manifest(bundle):
    """{path: [license folder, ...]} from the manifest's lines (# lines are its prose)."""
    entries = {}
    with open(os.path.join(bundle, MANIFEST)) as f:
        for line in f:
            words = line.split()
            if words and not words[0].startswith("#"):
                entries[words[0]] = words[1:]
    return entries


def is_elf(path):
    with open(path, "rb") as f:
        return f.read(4) == b"\x7fELF"


def bundle_files(bundle):
    """The bundle's regular files (links, such as bin/NAME -> ../libexec/launch, carry nothing), relative."""
    for folder, _, names in os.walk(bundle):
        for name in names:
            path = os.path.join(folder, name)
            if not os.path.islink(path) and os.path.isfile(path):
                yield os.path.relpath(path, bundle)


def has_text(folder):
    return os.path.isdir(folder) and any(
        os.path.isfile(os.path.join(folder, n)) and os.path.getsize(os.path.join(folder, n)) > 0
        for n in os.listdir(folder))


def problems(bundle):
    """What is wrong with the bundle's licenses, one line each; empty when nothing is."""
    if not os.path.isfile(os.path.join(bundle, MANIFEST)):
        return [f"{MANIFEST} is missing: the bundle names no licenses"]
    entries = read_manifest(bundle)
    found = []
    for path, names in sorted(entries.items()):
        if not names:
            found.append(f"{path}: its line names no license folder")
        if not os.path.exists(os.path.join(bundle, path)):
            found.append(f"{path}: named in {MANIFEST}, not in the bundle")
        for name in names:
            if not has_text(os.path.join(bundle, "share/licenses", name)):
                found.append(f"{path}: its license folder share/licenses/{name} is missing or holds no text")
    folders = [p for p in entries if p.endswith("/")]
    for rel in sorted(bundle_files(bundle)):
        if rel.startswith("share/licenses/") or rel in entries:
            continue
        if is_elf(os.path.join(bundle, rel)):
            found.append(f"{rel}: a program or library with no license (no line of {MANIFEST} names it)")
        elif not any(rel.startswith(folder) for folder in folders):
            found.append(f"{rel}: no license (no line of {MANIFEST} names it or a folder above it)")
    return found


def check(bundle):
    found = problems(bundle)
    for line in found:
        print(f"check_licenses: {line}")
    if found:
        print(f"check_licenses: FAILED: {len(found)} problem(s) in {bundle}")
        return 1
    files = list(bundle_files(bundle))
    elf = sum(1 for rel in files if not rel.startswith("share/licenses/") and is_elf(os.path.join(bundle, rel)))
    licenses = len(os.listdir(os.path.join(bundle, "share/licenses"))) - 1  # less the README
    print(f"check_licenses: {bundle}: every file has its license ({elf} programs, libraries and plugins "
          f"named one by one; {licenses} license folders)")
    return 0


def self_test():
    """A made-up bundle that passes, then each fault alone, which must fail naming what is wrong."""
    def write(bundle, rel, data):
        path = os.path.join(bundle, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)

    def make(bundle, manifest):
        write(bundle, "libexec/avtrain", b"\x7fELF avtrain")
        write(bundle, "lib/libgood.so.1", b"\x7fELF good")
        write(bundle, "lib/openmpi/mca_plugin.so", b"\x7fELF plugin")
        write(bundle, "share/avtrain/inputs/ci.ini", b"[train]\n")
        write(bundle, "share/licenses/avtrain/LICENSE", b"Apache License 2.0\n")
        write(bundle, "share/licenses/libgood1/copyright", b"good's copyright\n")
        os.makedirs(os.path.join(bundle, "bin"))
        os.symlink("../libexec/avtrain", os.path.join(bundle, "bin/avtrain"))  # a link: nothing to license
        write(bundle, MANIFEST, ("# prose\n" + manifest).encode())

    good = ("libexec/avtrain avtrain\nlib/libgood.so.1 libgood1\nlib/openmpi/mca_plugin.so libgood1\n"
            "share/avtrain/ avtrain\n")
    faults = {
        "a library with no license": (good, lambda b: write(b, "lib/libbad.so.2", b"\x7fELF bad"),
                                      "lib/libbad.so.2: a program or library with no license"),
        "a library named only by its folder": (good + "lib/ libgood1\n",
                                               lambda b: write(b, "lib/libbad.so.2", b"\x7fELF bad"),
                                               "lib/libbad.so.2: a program or library with no license"),
        "a data file outside every named folder": (good, lambda b: write(b, "share/openmpi/help.txt", b"help"),
                                                   "share/openmpi/help.txt: no license"),
        "an empty license folder": (good.replace("lib/libgood.so.1 libgood1", "lib/libgood.so.1 libempty"),
                                    lambda b: os.makedirs(os.path.join(b, "share/licenses/libempty")),
                                    "share/licenses/libempty is missing or holds no text"),
        "a license text of no bytes": (good, lambda b: write(b, "share/licenses/libgood1/copyright", b""),
                                       "share/licenses/libgood1 is missing or holds no text"),
        "a missing license folder": (good + "lib/libgood.so.1 libgood1 libnowhere\n", lambda b: None,
                                     "share/licenses/libnowhere is missing"),
        "a line for a file not in the bundle": (good + "lib/libgone.so.3 libgood1\n", lambda b: None,
                                                "lib/libgone.so.3: named in"),
        "no manifest": (good, lambda b: os.remove(os.path.join(b, MANIFEST)), "is missing: the bundle names no"),
    }
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        bundle = os.path.join(tmp, "whole")
        make(bundle, good)
        if problems(bundle):
            failures.append(f"the whole bundle failed: {problems(bundle)}")
        for what, (manifest, fault, expected) in faults.items():
            bundle = os.path.join(tmp, what.replace(" ", "-"))
            make(bundle, manifest)
            fault(bundle)
            found = problems(bundle)
            if not any(expected in line for line in found):
                failures.append(f"{what}: expected a problem with '{expected}', got {found}")
        # The command line too: exit 1 on a bundle with a library without license.
        bundle = os.path.join(tmp, "command-line")
        make(bundle, good)
        write(bundle, "lib/libbad.so.2", b"\x7fELF bad")
        run = subprocess.run([sys.executable, __file__, bundle], capture_output=True, text=True)
        if run.returncode != 1 or "lib/libbad.so.2" not in run.stdout:
            failures.append(f"the command on a library without license: exit {run.returncode}, {run.stdout!r}")
    for line in failures:
        print(f"check_licenses --self-test: FAILED: {line}")
    if not failures:
        print(f"check_licenses --self-test: the whole made-up bundle passes; each of {len(faults)} faults "
              "fails naming what is wrong; the command exits 1 on a library without license")
    return 1 if failures else 0


if __name__ == "__main__":
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(check(sys.argv[1]))
