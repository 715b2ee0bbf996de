#!/usr/bin/python3
"""Run llm-d's reference PVC evictor (llm-d-kv-cache
kv_connectors/pvc_evictor, a daemon) once against ROOT: start it with
CLEANUP_THRESHOLD=HIGH and TARGET_THRESHOLD=LOW, wait until filesystem
use, as its activator computes it from statvfs of STATFS_DIR, is at or
below LOW, then kill it and every process it started.  Prints the
seconds from its start to the target; its log goes to LOG.  STATFS_DIR
is the filesystem under ROOT where polling it costs nothing (latfs'
source).

It is killed, not stopped with SIGTERM: its children inherit the main
process's SIGTERM handler, and crawlers blocked on a full queue never
exit, so its shutdown takes 15 s per crawler before it gives up.  As a
child subreaper this script reaps them all, so nothing of it is left
when it returns.

Usage: pvc_run.py EVICTOR_DIR ROOT STATFS_DIR HIGH LOW LOG
"""
import ctypes
import os
import signal
import subprocess
import sys
import time

POLL_S = 0.01
PR_SET_CHILD_SUBREAPER = 36


def use_pct(path):
    sv = os.statvfs(path)
    return (sv.f_blocks - sv.f_bfree) * 100.0 / sv.f_blocks


def main():
    evictor, root, statfs_dir, high, low, log = sys.argv[1:7]
    env = dict(os.environ, PVC_MOUNT_PATH=root, CACHE_DIRECTORY="",
               CLEANUP_THRESHOLD=high, TARGET_THRESHOLD=low)
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        sys.exit("pvc_run.py: cannot become a child subreaper: %s"
                 % os.strerror(ctypes.get_errno()))
    with open(log, "w") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen([sys.executable, os.path.join(evictor, "evictor.py")],
                                cwd=evictor, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
        while use_pct(statfs_dir) > float(low):
            if proc.poll() is not None:
                sys.exit("pvc_run.py: the evictor exited (%d) before the target; see %s"
                         % (proc.returncode, log))
            time.sleep(POLL_S)
        took = time.monotonic() - t0
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    while True:
        try:
            os.wait()
        except ChildProcessError:
            break
    print("%.3f" % took)


main()
