"""A runtime in a process of its own, for test_lease.py to run under libfaketime (a clock minutes
off) or kill: it opens an engine on the store, says its clock's offset and whether it writes,
and after a while whether it still does (or ever did).

Usage: python lease_child.py '<SyncSettings fields as JSON>' SECONDS
Prints "clock-offset <s>", then "writable" or "read-only" at the start, then, after SECONDS,
"wrote" if it ever became the writer and wrote, and last its state: "writable" or "read-only".
"""

from __future__ import annotations

import json
import sys
import time


def main() -> int:
    from jupyter_gpu_ws.sync import SyncEngine, SyncSettings

    settings = SyncSettings(**json.loads(sys.argv[1]))
    watch = float(sys.argv[2])
    # faketime moves the wall clock, not CLOCK_MONOTONIC_RAW-based file times: compare with a file.
    probe = f"{settings.state_dir}.clock-probe"
    open(probe, "w").close()
    import os

    print(f"clock-offset {time.time() - os.stat(probe).st_mtime:.1f}", flush=True)
    engine = SyncEngine(settings)
    engine.open()
    print("writable" if engine.writable else "read-only", flush=True)
    wrote = False
    until = time.monotonic() + watch
    while time.monotonic() < until:
        if engine.writable:
            engine.sync()
            wrote = True
        time.sleep(0.1)
    if wrote:
        print("wrote", flush=True)
    print("writable" if engine.writable else "read-only", flush=True)
    engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
