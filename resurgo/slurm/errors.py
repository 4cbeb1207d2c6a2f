"""One error hierarchy for everything that talks to Slurm (mapped once, at the command layer)."""

from __future__ import annotations

from resurgo.errors import PermanentError, ResurgoError, TransientError


class SchedulerError(ResurgoError):
    """A Slurm command did not do what was asked."""


class SchedulerUnavailable(SchedulerError, TransientError):
    """slurmctld (or the SSH link to the login node) cannot be reached; retry later."""


class CommandTimeout(SchedulerError, TransientError):
    """A Slurm command ran past its deadline and was killed."""


class CommandFailed(SchedulerError, TransientError):
    """A Slurm command exited non-zero for a reason that is not one of the specific ones."""


class JobGone(SchedulerError, PermanentError):
    """slurmctld no longer knows the job (purged after MinJobAge, or never existed)."""


class ParseError(SchedulerError, PermanentError):
    """Slurm printed something the parsers do not understand; the message quotes it."""


class PreconditionFailed(SchedulerError, PermanentError):
    """The job is not in a state where the requested step makes sense."""


class ActionsNotAllowed(SchedulerError, PermanentError):
    """A gate (acknowledgement, partition allowlist) forbids scheduler actions."""
