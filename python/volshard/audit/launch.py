"""``python -m volshard.audit``: runs an unmodified DDP training script as
torchrun would, W local ranks on this machine, records what every loader
yields (record.py), runs it again to compare, and reports (analyze.py,
report.py). See docs/audit.md."""

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from . import analyze as an
from . import picture
from . import report

_PACKAGE_PARENT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                       "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
                       "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                       "TORCHELASTIC_USE_AGENT_STORE")

EPILOG = """\
Exit status: 0 no error-level finding, 1 at least one, 2 the script could not
be run (a rank failed or hung; its error and log tail are printed).

Each rank gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, a free MASTER_PORT) and runs on the
CPU: CUDA is hidden unless --gpus, NCCL runs as Gloo, and torch.cuda.set_device,
.to('cuda')/.cuda() and DistributedDataParallel's device_ids run on the CPU (the
report lists each substitution and where the script made it). A loader stops at
the start of its epoch E+1 (iter() raises an exception the script's own
`except Exception` lets through); the rank then closes its process group and
exits 0. The findings' kinds: """ + ", ".join(an.KINDS) + "."


def _parser():
    p = argparse.ArgumentParser(
        prog="python -m volshard.audit",
        description="Audit a PyTorch/MONAI DDP training script's data plan on this machine: which rank and worker "
                    "read which sample in every epoch, from which random state, and whether a rerun repeats it.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc", type=int, required=True, metavar="W",
                   help="local ranks to start, as torchrun's --nproc-per-node")
    p.add_argument("--epochs", type=int, default=2, metavar="E",
                   help="stop each rank when a loader begins its epoch E+1 (default 2)")
    p.add_argument("--reruns", type=int, default=2, metavar="R",
                   help="run the script R times in all, the same way, and compare runs 2..R with run 1 (default 2; "
                        "1: no rerun check)")
    p.add_argument("--json", metavar="FILE", help="write the findings and records as JSON, and the report beside it "
                                                  "(FILE with .txt)")
    p.add_argument("--png", metavar="FILE", help="draw which rank read which sample in each epoch (loaders of up "
                                                 f"to {picture.MAX_COLUMNS} samples)")
    p.add_argument("--timeout", type=float, default=900, metavar="S",
                   help="seconds a run may take before its ranks are stopped (default 900)")
    p.add_argument("--gpus", action="store_true", help="leave CUDA visible to the ranks (default: hidden, CPU only)")
    p.add_argument("--no-fingerprints", action="store_true",
                   help="do not hash the samples (faster on large volumes; reruns then compare indices only)")
    p.add_argument("--keep", metavar="DIR", help="keep the records and the ranks' output in DIR")
    p.add_argument("--quiet", action="store_true", help="print only the findings' summary line")
    p.add_argument("script", metavar="SCRIPT.py", help="the training script, run as `python SCRIPT.py ARGS`")
    p.add_argument("args", nargs=argparse.REMAINDER, metavar="ARGS", help="the script's arguments")
    return p


def reserve_port():
    """A socket holding a free port while ranks run (its user closes it): bound with SO_REUSEADDR and not
    listening, so that no other process is given the port meanwhile, while rank 0's store (torch binds it
    with SO_REUSEADDR) still listens on it. A port looked up and let go can be taken before rank 0 binds
    it, and torch's store client waits forever on a listener that is not a store. The tests' ranks hold
    theirs with it too (tests/python/conftest.py)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", 0))
    return s


def _rank_env(rank, world, port, config, gpus):
    env = {k: v for k, v in os.environ.items() if k not in _TORCHRUN_VARIABLES}
    env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world),
                "LOCAL_WORLD_SIZE": str(world), "GROUP_RANK": "0", "GROUP_WORLD_SIZE": "1", "ROLE_RANK": str(rank),
                "ROLE_WORLD_SIZE": str(world), "ROLE_NAME": "default", "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(port), "TORCHELASTIC_RUN_ID": "volshard-audit",
                "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
                "VOLSHARD_AUDIT_CONFIG": json.dumps(config)})
    env.setdefault("OMP_NUM_THREADS", "1")  # as torchrun sets it
    # The ranks import this very volshard (the script's `import volshard` included).
    env["PYTHONPATH"] = os.pathsep.join([_PACKAGE_PARENT] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                             if p and os.path.abspath(p) != _PACKAGE_PARENT])
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return env


def _kill(process):
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _done_ranks(directory):
    """Ranks that recorded their end (rank.py writes rank{R}.done last)."""
    return {int(name[4:-5]) for name in os.listdir(directory) if name.startswith("rank") and name.endswith(".done")}


def run_once(script, args, world, epochs, directory, timeout, gpus, fingerprints):
    """Starts the ranks, waits, and returns (statuses, seconds, problem): problem
    is None when every rank ended well (or was stopped after recording its end)."""
    reservation = reserve_port()
    port = reservation.getsockname()[1]
    config = {"dir": directory, "epochs": epochs, "fingerprints": fingerprints}
    procs, logs = [], []
    start = time.monotonic()
    for rank in range(world):
        log = open(os.path.join(directory, f"rank{rank}.log"), "wb")
        logs.append(log)
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "volshard.audit.rank", script] + list(args),
            env=_rank_env(rank, world, port, dict(config, rank=rank), gpus), stdout=log, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True))
    problem = None
    failed_at = None
    try:
        while True:
            codes = [p.poll() for p in procs]
            now = time.monotonic()
            if all(c is not None for c in codes):
                break
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = now  # torchrun stops the others when one fails; give them a moment to say why
            if failed_at is not None and now - failed_at > 10:
                break
            if now - start > timeout:
                problem = f"the run took longer than --timeout {timeout:g} s"
                break
            done = _done_ranks(directory)
            if done and all(codes[r] is not None or r in done for r in range(world)):
                # Every rank recorded its end; one still shutting down (a thread, a worker) gets 30 s.
                if all(codes[r] is not None for r in range(world) if r not in done):
                    deadline = now + 30
                    while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
                        time.sleep(0.1)
                    break
            time.sleep(0.05)
    finally:
        for p in procs:
            running = p.poll() is None
            _kill(p)  # also what a rank left behind in its session (a DataLoader worker)
            if running:
                p.wait()
        for log in logs:
            log.close()
        reservation.close()
    seconds = time.monotonic() - start
    done = _done_ranks(directory)
    statuses = [p.returncode for p in procs]
    if problem is None:
        bad = [r for r, c in enumerate(statuses) if c != 0 and not (r in done and c in (-signal.SIGKILL,))]
        if bad:
            problem = f"rank {bad[0]} exited with status {statuses[bad[0]]}"
    elif problem and all(r in done for r in range(world)):
        problem = None
    return statuses, seconds, problem


def _rank_error(directory, rank):
    path_prefix = f"rank{rank}."
    for name in sorted(os.listdir(directory)):
        if name.startswith(path_prefix) and name.endswith(".jsonl"):
            with open(os.path.join(directory, name)) as f:
                for line in f:
                    if '"t":"error"' in line:
                        return json.loads(line)
    return None


def _tail(path, lines=25):
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-lines:])
    except OSError:
        return ""


def _explain_failure(directory, world, problem, run_number):
    msg = [f"volshard audit: run {run_number} could not be completed: {problem}"]
    for rank in range(world):
        err = _rank_error(directory, rank)
        if err is None:
            continue
        where = an.short_site(err["where"]) if err.get("where") else "?"
        msg.append(f"  rank {rank}: {err['type']}: {err['message'].strip().splitlines()[0] if err['message'] else ''}"
                   f" (at {where})")
        text = f"{err['type']} {err['message']}"
        if any(word in text for word in ("CUDA", "cuda", "NVIDIA", "nvidia", "NCCL", "nccl", "GPU")):
            msg.append("  it asks for CUDA (or NCCL) there, and the audit runs the ranks on the CPU: NCCL runs as "
                       "Gloo, and torch.cuda.set_device, .to('cuda')/.cuda() and DistributedDataParallel's "
                       "device_ids run on the CPU, but not that call. Make its device torch.device('cuda' if "
                       "torch.cuda.is_available() else 'cpu'), or audit on a machine with W GPUs with --gpus.")
        break
    for rank in range(world):
        tail = _tail(os.path.join(directory, f"rank{rank}.log"))
        if tail.strip():
            msg.append(f"  rank {rank}'s last output:")
            msg.extend("    " + line for line in tail.rstrip().splitlines())
            break
    return "\n".join(msg)


def main(argv=None):
    parser = _parser()
    args = parser.parse_args(argv)
    if args.nproc < 1 or args.epochs < 1 or args.reruns < 1:
        parser.error(f"--nproc-per-node={args.nproc}, --epochs={args.epochs} and --reruns={args.reruns} must be >= 1")
    script = args.script
    if not os.path.isfile(script):
        print(f"volshard audit: no script {script}", file=sys.stderr)
        return 2
    work = args.keep or tempfile.mkdtemp(prefix="volshard_audit_")
    os.makedirs(work, exist_ok=True)
    runs, seconds = [], []
    try:
        for k in range(args.reruns):
            directory = os.path.join(work, f"run{k + 1}")
            if os.path.isdir(directory):
                shutil.rmtree(directory)
            os.makedirs(directory)
            statuses, took, problem = run_once(os.path.abspath(script), args.args, args.nproc, args.epochs, directory,
                                               args.timeout, args.gpus, not args.no_fingerprints)
            seconds.append(round(took, 2))
            if problem is not None:
                print(_explain_failure(directory, args.nproc, problem, k + 1), file=sys.stderr)
                if args.keep:
                    print(f"  records and logs: {directory}", file=sys.stderr)
                return 2
            runs.append(an.load_run(directory, k + 1))
        try:
            findings, resumes = an.analyze(runs)
        except Exception:  # noqa: BLE001  (a bug of the audit's, not a finding: say so, exit 2)
            import traceback
            traceback.print_exc()
            print("volshard audit: the analysis failed (a bug in volshard.audit; --keep DIR keeps the records "
                  "for a report)", file=sys.stderr)
            return 2
        meta = {"script": script, "args": list(args.args), "world_size": args.nproc, "epochs": args.epochs,
                "runs": args.reruns, "seconds": seconds, "cuda_hidden": not args.gpus,
                "command": ["python", "-m", "volshard.audit"] + (argv if argv is not None else sys.argv[1:])}
        if not runs[0].loaders:
            meta["note"] = "the script iterated no torch DataLoader"
        doc = report.document(meta, runs, findings, resumes)
        text = report.text(doc)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(doc, f, indent=1)
            base, _ = os.path.splitext(args.json)
            with open(base + ".txt", "w") as f:
                f.write(text)
        if args.png:
            png = picture.draw(report.picture_sections(runs, resumes), args.nproc)
            if png is None:
                print(f"volshard audit: no loader of at most {picture.MAX_COLUMNS} indexed samples to draw; "
                      f"{args.png} not written", file=sys.stderr)
            else:
                with open(args.png, "wb") as f:
                    f.write(png)
        if args.quiet:
            print(report.summary(doc))
        else:
            sys.stdout.write(text)
        return doc["exit_status"]
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
