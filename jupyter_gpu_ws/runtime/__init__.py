"""The runtime's lifecycle: deadline sources and countdown, preemption watchers, Git versioning."""

from .deadline import (
    Deadline,
    DeadlineFile,
    IdleInputs,
    KernelActivity,
    RuntimeClock,
    RuntimeEvent,
    RuntimeSettings,
    parse_deadline,
    parse_duration,
)

__all__ = [
    "Deadline", "DeadlineFile", "IdleInputs", "KernelActivity", "RuntimeClock", "RuntimeEvent",
    "RuntimeSettings", "parse_deadline", "parse_duration",
]
