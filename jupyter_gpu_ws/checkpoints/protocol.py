"""The messages between the server and the kernel agent, defined once for both sides.

The server opens a comm with target `TARGET` (on a kernel subshell, so it is handled while a
training cell runs) and sends `{"type": "checkpoint", "request_id": ...}` or
`{"type": "status"}`; the agent answers in its handler with `{"type": "accepted" | "done" |
"status" | "error", ...}`. Everything else the server learns from the agent's registration
file: `<runtime dir>/gpuws-agents/<kernel id>.json`, rewritten whenever the state changes.
"""

TARGET = "jupyter_gpu_ws.checkpoints"
AGENTS_DIR = "gpuws-agents"

CHECKPOINT = "checkpoint"
STATUS = "status"
ACCEPTED = "accepted"
DONE = "done"
ERROR = "error"
