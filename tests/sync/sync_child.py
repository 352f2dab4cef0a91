"""One sync pass in a process of its own, for test_kill.py to kill at any moment.

Usage: python sync_child.py '<SyncSettings fields as JSON>'
(with "passphrase": the workspace is encrypted with it; see settings_from)
Prints "syncing" once the engine holds the lease and the pass begins, "done" when it ended.
"""

from __future__ import annotations

import json
import sys
from typing import Any


def settings_from(fields: dict[str, Any]) -> Any:
    """SyncSettings from JSON fields; a "passphrase" field turns encryption on."""
    from jupyter_gpu_ws.store.crypto import Encryption
    from jupyter_gpu_ws.sync import SyncSettings

    fields = dict(fields)
    passphrase = fields.pop("passphrase", None)
    encryption = Encryption(passphrase) if passphrase else None
    return SyncSettings(**fields, encryption=encryption)


def main() -> int:
    from jupyter_gpu_ws.sync import SyncEngine

    engine = SyncEngine(settings_from(json.loads(sys.argv[1])))
    engine.open()
    if engine.read_only:
        print(f"read-only: {engine.read_only_reason}", flush=True)
        return 3
    print("syncing", flush=True)
    report = engine.sync()
    print(f"done {len(report.uploaded)} uploaded, {len(report.errors)} errors", flush=True)
    engine.close()
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
