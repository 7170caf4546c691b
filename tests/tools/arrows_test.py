#!/usr/bin/env python3
"""Arrows only point down (STYLE.md): every #include of a volshard library's header from another library's
sources, and of a trainer room's header from another room (trainer/README.md), names a floor below or its own.

    python3 tests/tools/arrows_test.py [PROJECT_ROOT]

Exits 1 naming each upward include as file:line, the arrow and what that floor may read."""
import pathlib
import re
import sys

# What each library may include besides itself (STYLE.md's layers).
LIBRARIES = {
    "core": set(),
    "sampler": {"core"},
    "volume_io": {"core"},
    "transforms": {"core"},
    "datasets": {"transforms", "volume_io", "core"},
    "trainer": {"datasets", "transforms", "volume_io", "sampler", "core"},
    "python": {"datasets", "transforms", "volume_io", "sampler", "core"},  # python/src: bindings only
}
# Headers a library reads across its arrows, each with why: a header whose templates it
# instantiates, never a library it links (a call into one would fail to link, and show here).
HEADER_ONLY = {
    ("python", "volshard/trainer/options.h"):
        "_train_config_keys visits a default TrainOptions' table (for_each_field, a template) for the "
        "keys a train config may hold; volshard_trainer is not linked",
}
# trainer/'s rooms, each with the rooms it may read (trainer/README.md), and the room each public header's
# source lives in.
ROOMS = {
    "parallel": set(),
    "models": {"parallel"},
    "losses": set(),
    "io": {"models", "parallel"},
    "engine": {"io", "losses", "models", "parallel"},
    "audit": {"engine", "io", "losses", "models", "parallel"},
}
PUBLIC_ROOM = {
    "comm.h": "parallel", "device.h": "parallel", "launch.h": "parallel", "rendezvous.h": "parallel",
    "model.h": "models", "loss.h": "losses", "serialize.h": "io",
    "options.h": "engine", "rank_plan.h": "engine", "train.h": "engine", "data_split.h": "engine",
    "predict.h": "engine", "diff.h": "audit", "repro.h": "audit",
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')


def sources(root, folder):
    for path in sorted((root / folder).rglob("*")):
        if path.suffix in (".h", ".cpp") and path.is_file():
            yield path


def includes(path):
    for number, line in enumerate(path.read_text().splitlines(), 1):
        m = INCLUDE.match(line)
        if m:
            yield number, m.group(1)


def room_of(root, path):
    """The room of a trainer file: its folder under src/, or for a public header its source's."""
    rel = path.relative_to(root / "trainer")
    if rel.parts[0] == "src":
        return rel.parts[1] if len(rel.parts) > 2 else None
    return PUBLIC_ROOM.get(path.name)


def check(root):
    problems = []
    seen = set()
    for library, below in LIBRARIES.items():
        for path in sources(root, library):
            for number, name in includes(path):
                seen.add((library, name))
                parts = name.split("/")
                if len(parts) >= 3 and parts[0] == "volshard" and parts[1] in LIBRARIES:
                    if parts[1] != library and parts[1] not in below and (library, name) not in HEADER_ONLY:
                        problems.append(f"{path.relative_to(root)}:{number}: {library} -> {parts[1]} "
                                        f"({name}); {library} reads {', '.join(sorted(below)) or 'std only'}")
    for path in sources(root, "trainer"):
        room = room_of(root, path)
        if room is None:
            problems.append(f"{path.relative_to(root)}: in no room (trainer/src/<room>/, or a public header "
                            f"this test's PUBLIC_ROOM does not place)")
            continue
        for number, name in includes(path):
            parts = name.split("/")
            if parts[0] in ROOMS and len(parts) == 2:
                target = parts[0]
            elif parts[:2] == ["volshard", "trainer"]:
                target = PUBLIC_ROOM.get(parts[2])
                if target is None:
                    problems.append(f"{path.relative_to(root)}:{number}: {name} is in no room")
                    continue
            else:
                continue
            if target != room and target not in ROOMS[room]:
                problems.append(f"{path.relative_to(root)}:{number}: room {room} -> {target} ({name}); "
                                f"{room} reads {', '.join(sorted(ROOMS[room])) or 'no other room'}")
    for library, name in sorted(set(HEADER_ONLY) - seen):
        problems.append(f"{library} no longer includes {name}: drop it from HEADER_ONLY")
    placed = {p.name for p in (root / "trainer/include/volshard/trainer").glob("*.h")}
    for name in sorted(set(PUBLIC_ROOM) - placed):
        problems.append(f"trainer/include/volshard/trainer/{name}: placed in a room here but not there")
    return problems


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parents[2])
    problems = check(root)
    for p in problems:
        print(p)
    print(f"arrows: {len(problems)} pointing up" if problems else "arrows: all point down")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
