"""One restore in a process of its own, for test_restore.py to kill at any moment.

Usage: python restore_child.py '<SyncSettings fields as JSON>' [PART_SIZE]
Prints "restoring" once the engine is built and the restore begins, "done" when it ended.
PART_SIZE (bytes) makes large files come in parts of that size from twice that size on, so
that a small test tree has many parts in flight.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from jupyter_gpu_ws.sync import SyncEngine, SyncSettings, restore

    if len(sys.argv) > 2:
        restore.PART_SIZE = int(sys.argv[2])
        restore.PARTS_FROM = 2 * restore.PART_SIZE
    engine = SyncEngine(SyncSettings(**json.loads(sys.argv[1])))
    print("restoring", flush=True)
    report = engine.restore()
    print(f"done {len(report.restored)} restored, {len(report.errors)} errors", flush=True)
    engine.close()
    return 0 if not report.errors else 1


if __name__ == "__main__":
    sys.exit(main())
