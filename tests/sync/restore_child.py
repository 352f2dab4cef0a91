"""One restore in a process of its own, for test_restore.py to kill at any moment.

Usage: python restore_child.py '<SyncSettings fields as JSON>'
Prints "restoring" once the engine is built and the restore begins, "done" when it ended.
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from jupyter_gpu_ws.sync import SyncEngine, SyncSettings

    engine = SyncEngine(SyncSettings(**json.loads(sys.argv[1])))
    print("restoring", flush=True)
    report = engine.restore()
    print(f"done {len(report.restored)} restored, {len(report.errors)} errors", flush=True)
    engine.close()
    return 0 if not report.errors else 1


if __name__ == "__main__":
    sys.exit(main())
