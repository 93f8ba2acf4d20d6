#!/usr/bin/python3
"""No include points up the floors: a room includes only the rooms its CMake targets link.

The rooms are the directories of src/ (core, data, ..., train, app) and cuda/. Each room's
CMakeLists.txt defines its targets (avtrain_<room>; app also avtrain_options and the mains) and
what they link (target_link_libraries, directly or through the targets they link; links under an
if() count, as for avtrain_cuda). A room may include its own headers and those of every room its
targets reach. A source file that a target lists answers to the targets that list it (all of them);
a header, to the room's targets together.

Every `#include "ROOM/..."` of a file in src/ or cuda/ is checked, and a bare `#include "name"`
that names a header of another room (cuda/'s headers, which avtrain_cuda puts on the include path).
One line per include that is not allowed, and exit 1:
    src/model/layer.hpp:16: model includes data (avtrain_model does not link avtrain_data)

usage: check_include_floors.py [SOURCE_DIR]   (default: the checkout this script is in)
       check_include_floors.py --self-test    a tree with an include up the floors fails, its fix passes
"""
import os
import re
import sys
import tempfile

COMMAND = re.compile(r"\b(add_library|add_executable|target_link_libraries|target_sources)\s*\(([^)]*)\)", re.S)
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
KEYWORDS = {"STATIC", "SHARED", "OBJECT", "MODULE", "INTERFACE", "PUBLIC", "PRIVATE", "EXCLUDE_FROM_ALL",
            "IMPORTED", "GLOBAL", "ALIAS", "LINK_PUBLIC", "LINK_PRIVATE", "debug", "optimized", "general"}
SOURCE_SUFFIXES = (".c", ".cc", ".cpp", ".cxx", ".cu", ".h", ".hpp", ".cuh", ".inl")


def room_dirs(root):
    """room -> its directory: every directory of src/ with a CMakeLists.txt, and cuda/."""
    rooms = {}
    src = os.path.join(root, "src")
    for name in sorted(os.listdir(src)):
        if os.path.isfile(os.path.join(src, name, "CMakeLists.txt")):
            rooms[name] = os.path.join(src, name)
    if os.path.isfile(os.path.join(root, "cuda", "CMakeLists.txt")):
        rooms["cuda"] = os.path.join(root, "cuda")
    return rooms


def read_targets(rooms):
    """target -> (room, set of linked items, set of its source files' paths)."""
    targets = {}
    for room, d in rooms.items():
        text = re.sub(r"#[^\n]*", "", open(os.path.join(d, "CMakeLists.txt")).read())
        for command, args in COMMAND.findall(text):
            words = args.split()
            if not words:
                continue
            name, rest = words[0], [w for w in words[1:] if w not in KEYWORDS]
            if command in ("add_library", "add_executable"):
                targets.setdefault(name, (room, set(), set()))
            if name not in targets:
                continue
            if command == "target_link_libraries":
                targets[name][1].update(rest)
            else:
                targets[name][2].update(os.path.normpath(os.path.join(d, w)) for w in rest
                                        if w.endswith(SOURCE_SUFFIXES) and "$" not in w)
    return targets


def reach(targets, name):
    """The rooms a target may include: its own and those of every target it links, transitively."""
    seen, todo = set(), [name]
    while todo:
        t = todo.pop()
        if t in seen or t not in targets:
            continue
        seen.add(t)
        todo.extend(targets[t][1])
    return {targets[t][0] for t in seen}


def included_room(path, name, rooms):
    """The room an include names, or None (a system or generated header, or not a room's)."""
    first = name.split("/")[0]
    if "/" in name and first in rooms:
        return first
    if "/" in name:
        return None
    here = os.path.dirname(path)
    if os.path.exists(os.path.join(here, name)):
        return None  # beside the file: its own room
    for room, d in rooms.items():
        if os.path.exists(os.path.join(d, name)):
            return room
    return None


def check(root):
    rooms = room_dirs(root)
    targets = read_targets(rooms)
    room_targets = {room: sorted(t for t, v in targets.items() if v[0] == room) for room in rooms}
    room_reach = {room: set().union({room}, *(reach(targets, t) for t in ts)) for room, ts in room_targets.items()}
    listed_in = {}
    for t, (_, _, sources) in targets.items():
        for s in sources:
            listed_in.setdefault(s, []).append(t)
    bad = []
    for room, d in sorted(rooms.items()):
        for dirpath, dirnames, filenames in os.walk(d):
            dirnames.sort()
            for f in sorted(filenames):
                if not f.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.normpath(os.path.join(dirpath, f))
                owners = sorted(listed_in.get(path, []))
                if owners:
                    allowed = set.intersection(*({room} | reach(targets, t) for t in owners))
                else:
                    owners = room_targets[room]
                    allowed = room_reach[room]
                with open(path, errors="replace") as text:
                    for number, line in enumerate(text, 1):
                        m = INCLUDE.match(line)
                        if not m:
                            continue
                        to = included_room(path, m.group(1), rooms)
                        if to is None or to in allowed:
                            continue
                        lib = next((t for t, v in targets.items() if v[0] == to and t.startswith("avtrain_")),
                                   f"a target of {to}/")
                        who = " nor ".join(owners) if owners else f"no target of {room}/"
                        bad.append(f"{os.path.relpath(path, root)}:{number}: {room} includes {to} "
                                   f"({who} does not link {lib})")
    return bad, len(rooms)


def self_test():
    with tempfile.TemporaryDirectory() as root:
        def write(path, text):
            os.makedirs(os.path.dirname(os.path.join(root, path)), exist_ok=True)
            with open(os.path.join(root, path), "w") as f:
                f.write(text)
        write("src/core/CMakeLists.txt", "add_library(avtrain_core STATIC a.cpp)\n")
        write("src/core/a.hpp", "#pragma once\n")
        write("src/data/CMakeLists.txt", "add_library(avtrain_data STATIC b.cpp)\n"
              "target_link_libraries(avtrain_data PUBLIC avtrain_core)\n")
        write("src/data/b.hpp", '#include "core/a.hpp"\n')
        write("src/model/CMakeLists.txt", "add_library(avtrain_model STATIC\n  c.cpp)\n"
              "# avtrain_data is not linked\ntarget_link_libraries(avtrain_model PUBLIC avtrain_core)\n")
        write("src/model/c.cpp", '#include "model/c.hpp"\n#include "core/a.hpp"\n')
        write("src/model/c.hpp", '#pragma once\n#include "data/b.hpp"\n')
        bad, _ = check(root)
        want = ["src/model/c.hpp:2: model includes data (avtrain_model does not link avtrain_data)"]
        if bad != want:
            sys.exit(f"check_include_floors --self-test: an include up the floors gave {bad}, not {want}")
        write("src/model/CMakeLists.txt", "add_library(avtrain_model STATIC c.cpp)\n"
              "target_link_libraries(avtrain_model PUBLIC avtrain_data)\n")
        bad, _ = check(root)
        if bad:
            sys.exit(f"check_include_floors --self-test: the linked include still fails: {bad}")
        write("src/core/a.hpp", '#pragma once\n#include "model/c.hpp"\n')
        bad, _ = check(root)
        want = ["src/core/a.hpp:2: core includes model (avtrain_core does not link avtrain_model)"]
        if bad != want:
            sys.exit(f"check_include_floors --self-test: an include down to up gave {bad}, not {want}")
    print("check_include_floors --self-test: an include up the floors fails, its fix passes")


def main():
    if len(sys.argv) > 2 or (len(sys.argv) == 2 and sys.argv[1] in ("-h", "--help")):
        sys.exit(__doc__)
    if len(sys.argv) == 2 and sys.argv[1] == "--self-test":
        return self_test()
    root = sys.argv[1] if len(sys.argv) == 2 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    bad, rooms = check(root)
    if bad:
        print("\n".join(bad))
        sys.exit(f"check_include_floors: {len(bad)} include(s) of a room the including target does not link")
    print(f"check_include_floors: every include of {rooms} rooms stays on its floor or goes down")


if __name__ == "__main__":
    main()
