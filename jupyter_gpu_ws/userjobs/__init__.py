"""Jobs that outlive the runtime: a script or notebook the server runs as a child process,
recorded in the store, retried on failure, stopped at its checkpoint before the runtime ends
and relaunched by the next one (docs/jobs.md). No Tornado inside."""

from .manager import JobInputError, JobManager, JobNotFound
from .record import Attempt, JobRecord, RecordError

__all__ = ["Attempt", "JobInputError", "JobManager", "JobNotFound", "JobRecord", "RecordError"]
