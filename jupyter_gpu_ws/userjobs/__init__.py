"""Jobs that outlive the runtime: a script or notebook the server runs as a child process,
recorded in the store, retried on failure, stopped at its checkpoint before the runtime ends
and relaunched by the next one (docs/jobs.md). No Tornado inside.

Nothing is imported here: `python -m jupyter_gpu_ws.userjobs.notebook` (a notebook job's
process) loads the package first, and should find none of the server's modules in it."""
