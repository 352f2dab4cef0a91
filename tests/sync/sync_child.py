"""One sync pass in a process of its own, for test_kill.py to kill at any moment.

Usage: python sync_child.py '<SyncSettings fields as JSON>'
(with "passphrase": the workspace is encrypted with it; see settings_from)
(with "flush_log": a local-folder store that appends to that file, as each flush of the store
ends, the keys it made durable: those written before the flush began; see FlushLog)
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


# How long FlushLog's disk takes to make a flush durable: long enough that a kill is likely to
# land while a flush is under way, as on a slow disk.
FLUSH_SECONDS = 1.0


def flush_logged(root: str, log: str) -> Any:
    """A local-folder store that says which keys each of its flushes made durable: what a power
    cut at any moment would have kept, which a kill -9 alone cannot show."""
    import threading
    import time

    from jupyter_gpu_ws.store.local import LocalBackend

    class FlushLog(LocalBackend):
        def __init__(self) -> None:
            super().__init__(root)
            self._keys: list[str] = []
            self._keys_lock = threading.Lock()

        def put(self, local: str, key: str, *args: Any, **kwargs: Any) -> int:
            size = super().put(local, key, *args, **kwargs)
            with self._keys_lock:
                self._keys.append(key)
            return size

        def flush(self) -> None:
            with self._keys_lock:
                keys, self._keys = self._keys, []
            super().flush()
            time.sleep(FLUSH_SECONDS)  # the disk at work: nothing of this flush is durable yet
            with open(log, "a", encoding="utf-8") as f:
                f.write("".join(f"{key}\n" for key in keys))

    return FlushLog()


def main() -> int:
    from jupyter_gpu_ws.sync import SyncEngine

    fields = json.loads(sys.argv[1])
    log = fields.pop("flush_log", None)
    backend = flush_logged(fields["store_url"], log) if log else None
    engine = SyncEngine(settings_from(fields), backend=backend)
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
