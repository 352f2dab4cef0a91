"""The messages between the server and the kernel agent, defined once for both sides.

Both live in the runtime folder the server shares with its kernels:

- `<runtime>/gpuws-agents/<kernel id>.json`: the agent's registration, rewritten whenever its
  state changes (what it tracks, its last checkpoint, a pending request);
- `<runtime>/gpuws-agents/<kernel id>.request.json`: `{"request_id": ...}`, written by the
  server to ask for a checkpoint. An agent thread watches it, so the request arrives while a
  training cell runs, on any kernel, and the kernel's Jupyter messaging is left alone.

Why not a comm on an ipykernel 7 subshell: with ipykernel 7.4, any message a second client
sends on a subshell while the main shell runs a cell takes over the main shell's reply
routing, and that cell's execute_reply never reaches the notebook (docs/subshell_probe.py
shows it). The agent still answers the comm target `TARGET` (`{"type": "checkpoint" |
"status"}`), which suits clients on an idle kernel.
"""

TARGET = "jupyter_gpu_ws.checkpoints"
AGENTS_DIR = "gpuws-agents"

CHECKPOINT = "checkpoint"
STATUS = "status"
ACCEPTED = "accepted"
DONE = "done"
ERROR = "error"
REQUEST_SUFFIX = ".request.json"
