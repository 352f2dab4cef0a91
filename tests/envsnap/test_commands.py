"""The installers' output as the panel and the CLI show it: plain text, one line at a time."""

from __future__ import annotations

import sys

from jupyter_gpu_ws.envsnap.commands import run_command

NOISY = r"""
import os, sys
print("\x1b[2mUsing Python 3.11.7 environment\x1b[0m", flush=True)
print("\x1b]8;;https://example.org\x07a link\x1b]8;;\x07 and a bell\x07", flush=True)
print("colours asked off:", os.environ.get("NO_COLOR"), flush=True)
print("\x1b[31merror: \x1b[1mno such package\x1b[0m", file=sys.stderr)
sys.exit(1)
"""


def test_terminal_escapes_never_reach_the_log_or_the_error() -> None:
    lines: list[str] = []
    error = run_command([sys.executable, "-c", NOISY], lines.append)
    assert lines == [
        "Using Python 3.11.7 environment",
        "a link and a bell",
        "colours asked off: 1",
        "error: no such package",
    ]
    assert error == "error: no such package"
