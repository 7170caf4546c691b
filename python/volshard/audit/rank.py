"""One rank of an audited script: ``python -m volshard.audit.rank SCRIPT [ARGS...]``,
started by the launcher with torchrun's environment and VOLSHARD_AUDIT_CONFIG
(a JSON object: dir, rank, epochs, fingerprints). It installs the recorder,
then runs SCRIPT as ``python SCRIPT ARGS`` would (runpy, ``__name__ ==
"__main__"``, sys.argv and sys.path[0] as Python sets them).

How a rank ends: the script ends by itself, or a loader begins the epoch after
the last one audited and ``iter(loader)`` raises AuditStop (a BaseException,
which passes the script's ``except Exception`` and runs its ``finally``
blocks). The rank then records why it ended, destroys the process group if the
script left one, and leaves with os._exit(0): the audit ended the script, so
its teardown (atexit handlers, torch's C++ destructors at interpreter exit) is
not part of what is audited, and after such a stop Gloo's destructors aborted
about one rank exit in six ("terminate called without an active exception",
SIGABRT, with no Python frame left), failing whole audits. DataLoader workers
end with their iterators, or by torch's watchdog when their rank is gone; the
launcher also ends each rank's process group."""

import json
import os
import runpy
import sys
import traceback


def _where(tb):
    """file:line of the innermost frame of the traceback in the user's code."""
    from . import record
    site = None
    for frame, lineno in traceback.walk_tb(tb):
        if record._is_user_file(frame.f_code.co_filename):
            site = f"{os.path.abspath(frame.f_code.co_filename)}:{lineno}"
    return site


def main():
    config = json.loads(os.environ["VOLSHARD_AUDIT_CONFIG"])
    if len(sys.argv) < 2:
        print("usage: python -m volshard.audit.rank SCRIPT [ARGS...] (started by volshard.audit)", file=sys.stderr)
        return 2
    script = os.path.abspath(sys.argv[1])
    from . import devices, record
    recorder = record.Recorder(config["dir"], config["rank"], config["epochs"], config.get("fingerprints", True))
    record.install(recorder)
    devices.substitute()
    sys.argv = [sys.argv[1]] + sys.argv[2:]
    sys.path[0] = os.path.dirname(script)
    status, how = 0, "ended"
    try:
        runpy.run_path(script, run_name="__main__")
    except record.AuditStop as stop:
        how = "stopped"
        recorder.emit({"t": "stop", "why": str(stop)})
    except SystemExit as e:
        code = e.code
        status = 0 if code is None else (code if isinstance(code, int) else 1)
        how = f"exit {status}"
        if status != 0:
            recorder.emit({"t": "error", "type": "SystemExit", "message": str(code), "where": _where(e.__traceback__),
                           "traceback": traceback.format_exc()[-4000:]})
    except BaseException as e:  # noqa: BLE001  (the script's failure is the record)
        status, how = 1, "error"
        recorder.emit({"t": "error", "type": type(e).__name__, "message": str(e)[:2000],
                       "where": _where(e.__traceback__), "traceback": traceback.format_exc()[-4000:]})
        traceback.print_exc()
    if how == "stopped":
        try:
            import torch.distributed as dist
            if dist.is_available() and dist.is_initialized():
                dist.destroy_process_group()
        except Exception:  # noqa: BLE001  (a peer already gone: nothing left to close)
            pass
    recorder.emit({"t": "done", "how": how, "status": status})
    recorder.close()
    with open(os.path.join(config["dir"], f"rank{config['rank']}.done"), "w") as f:
        f.write(how + "\n")  # the launcher waits for these, not for the record files
    if how == "stopped":  # the records are complete; the script's teardown is not audited
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)
    return status


if __name__ == "__main__":
    sys.exit(main())
