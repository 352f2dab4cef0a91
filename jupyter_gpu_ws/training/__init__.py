"""Training in view: scalars from the loop, progress against the deadline, curves and anomalies.

No Tornado inside: `recorder` runs in the kernel, `history`, `progress`, `anomalies` and
`watch` on the server, and both sides share `history` (a run's curves travel in its checkpoints).
"""
