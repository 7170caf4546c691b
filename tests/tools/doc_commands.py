#!/usr/bin/env python3
"""Every command that README.md and docs/*.md show in their ```sh blocks, run
as written, in order, from a scratch folder laid out as the project root
(build/bin, configs/ and tests/ linked): a command that fails, or a command in
synopsis notation ([optional] or a|b choices), fails this test, so the docs
stay runnable.

Commands of `build/bin/` run. The others are run elsewhere, and listed:
`make demo` and `make test` (CI runs them), `make python` and `pip install .`
(python_wheel_pytest), `cmake --install` (package_consumers).

Where a documented run would take minutes, SHRINK below makes it smaller, each
change with its reason and printed beside the command; a shrink that matches
no command fails the test, so the table follows the docs. Each document runs
in a folder of its own, except docs/cli.md, which continues docs/training.md's
(its prediction picture and checkpoint are the predict and train commands
there).

  doc_commands.py --build build --root . [--only README.md]
"""
import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

# (document, command as written, change, why). The change is applied once to
# the first command of the document that contains `written`.
SHRINK = [
    ("README.md", "synth --out data --count 40 --size 128", "synth --out data --count 8 --size 96",
     "8 volumes of 96^3 still hold the tutorial's 96^3 crops"),
    ("README.md", "train --data data --out run --nproc-per-node 2",
     "train --data data --out run --nproc-per-node 2 --max-steps 1 --crop 32",
     "the tutorial's first step, not its 5 epochs, on 32^3 crops (a 96^3 step takes 11 s of both cores)"),
    ("README.md", "--image data/img39.nii.gz", "--image data/img7.nii.gz",
     "the last of the 8 volumes: a validation volume, as img39 is of 40"),
    ("README.md", "repro --data data --crop 32", "repro --data data --crop 32 --val-every 0",
     "no validation between repro's steps"),
    ("docs/training.md", "synth --out data --count 40 --size 128", "synth --out data --count 8 --size 96",
     "8 volumes of 96^3 still hold the tutorial's 96^3 crops"),
    ("docs/training.md", "train --data data --out run --nproc-per-node 2",
     "train --data data --out run --nproc-per-node 2 --max-steps 1 --crop 32",
     "the tutorial's first step, not its 5 epochs, on 32^3 crops (a 96^3 step takes 11 s of both cores)"),
    ("docs/training.md", "--image data/img39.nii.gz", "--image data/img7.nii.gz",
     "the last of the 8 volumes: a validation volume, as img39 is of 40"),
    ("docs/training.md", "--nproc-per-node 2 --resume run", "--nproc-per-node 2 --resume run --max-steps 2",
     "one step more (on the run's 32^3 crops, from its config.json)"),
    ("docs/training.md", "--nproc-per-node 2 --overwrite", "--nproc-per-node 2 --overwrite --max-steps 1 --crop 32",
     "the first step of the fresh run, on 32^3 crops"),
    ("docs/training.md", "repro --data data --crop 32", "repro --data data --crop 32 --val-every 0",
     "no validation between repro's steps"),
    ("docs/cli.md", "synth --out data --count 40 --size 128", "synth --out data --count 8 --size 96",
     "the volumes docs/training.md's commands wrote, which cli.md's continue"),
]

# Documents in the order they run; a document named with "after" runs in the
# folder the other one left.
DOCS = ["README.md", "docs/training.md", "docs/cli.md", "docs/platform.md", "docs/reproducibility.md",
        "docs/sampler.md", "docs/volumes.md", "docs/semantics.md", "docs/audit.md"]
AFTER = {"docs/cli.md": "docs/training.md"}

RUN_ELSEWHERE = {
    "make demo": "CI and the README's first command",
    "make test": "CI",
    "make python": "python_module_pytest builds the module",
    "pip install .": "python_wheel_pytest",
    "cmake --install build --prefix /opt/volshard": "package_consumers",
}


def sh_blocks(text):
    """The ```sh blocks' lines, continuations joined, comments dropped."""
    commands, block, pending = [], False, ""
    for raw in text.splitlines():
        if raw.strip().startswith("```"):
            block = raw.strip() in ("```sh", "```bash") if not block else False
            continue
        if not block:
            continue
        line = pending + raw
        if line.rstrip().endswith("\\") and "#" not in raw:
            pending = line.rstrip()[:-1] + " "
            continue
        pending = ""
        command = strip_comment(line).strip()
        if command:
            commands.append(command)
    return commands


def strip_comment(line):
    """The line without a `# comment` (a # after blank space, outside quotes)."""
    quote = None
    for k, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "'\"":
            quote = c
        elif c == "#" and (k == 0 or line[k - 1] in " \t"):
            return line[:k]
    return line


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True, help="the build folder (its bin/)")
    parser.add_argument("--root", required=True, help="the project root (README.md, docs/, configs/)")
    parser.add_argument("--only", action="append", help="run only this document (repeatable)")
    args = parser.parse_args()
    root, build = os.path.abspath(args.root), os.path.abspath(args.build)
    scratch = tempfile.mkdtemp(prefix="volshard_doc_commands_")
    failures, used = [], set()
    folders = {}
    env = dict(os.environ)
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    try:
        for doc in DOCS:
            if args.only and doc not in args.only and doc not in {AFTER.get(o) for o in args.only}:
                continue
            with open(os.path.join(root, doc)) as f:
                commands = sh_blocks(f.read())
            if doc in AFTER:
                folder = folders[AFTER[doc]]
            else:
                folder = os.path.join(scratch, doc.replace("/", "_"))
                os.makedirs(os.path.join(folder, "build"))
                os.symlink(os.path.join(build, "bin"), os.path.join(folder, "build", "bin"))
                os.symlink(os.path.join(root, "configs"), os.path.join(folder, "configs"))
                os.symlink(os.path.join(root, "tests"), os.path.join(folder, "tests"))  # docs/audit.md's scripts
            folders[doc] = folder
            for command in commands:
                where = f"{doc}: {command}"
                if command in RUN_ELSEWHERE:
                    print(f"-- {where}\n   not run here: {RUN_ELSEWHERE[command]}")
                    continue
                if not command.startswith("build/bin/"):
                    failures.append(f"{where}: neither a build/bin/ command nor one listed in RUN_ELSEWHERE")
                    continue
                if re.search(r"\[|\]|\w\|\w", command):
                    failures.append(f"{where}: synopsis notation ([...] or a|b), not a command to run")
                    continue
                run, reasons = command, []
                for k, (d, written, change, why) in enumerate(SHRINK):
                    if d == doc and k not in used and written in run:
                        run = run.replace(written, change, 1)
                        used.add(k)
                        reasons.append(why)
                print(f"-- {doc}: {run}", flush=True)
                for why in reasons:
                    print(f"   (shrunk: {why})")
                start = time.monotonic()
                p = subprocess.run(shlex.split(run), cwd=folder, env=env, capture_output=True, text=True,
                                   timeout=600)
                print(f"   exit {p.returncode} in {time.monotonic() - start:.1f} s", flush=True)
                if p.returncode != 0:
                    failures.append(f"{where}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}")
        for k, (d, written, _, _) in enumerate(SHRINK):
            if k not in used and (not args.only or d in args.only):
                failures.append(f"SHRINK entry for {d} matches no command: {written!r} (update the table)")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for f in failures:
        print(f"FAIL {f}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
