"""The runtime's lifecycle: deadline sources and countdown, preemption watchers, Git versioning."""

from .deadline import (
    Deadline,
    DeadlineFile,
    HubLimits,
    IdleInputs,
    KernelActivity,
    RuntimeClock,
    RuntimeEvent,
    RuntimeSettings,
    parse_deadline,
    parse_duration,
)
from .preemption import (
    AwsSpotCheck,
    AzureScheduledEventsCheck,
    GcpPreemptedCheck,
    PreemptionNotice,
    PreemptionWatcher,
    make_checks,
)

# The Git tier (GitPython) is imported from `jupyter_gpu_ws.runtime.gitrepo` by whoever needs it,
# so the countdown does not pay for loading GitPython.

__all__ = [
    "AwsSpotCheck",
    "AzureScheduledEventsCheck",
    "Deadline",
    "DeadlineFile",
    "HubLimits",
    "GcpPreemptedCheck",
    "IdleInputs",
    "KernelActivity",
    "PreemptionNotice",
    "PreemptionWatcher",
    "RuntimeClock",
    "RuntimeEvent",
    "RuntimeSettings",
    "make_checks",
    "parse_deadline",
    "parse_duration",
]
