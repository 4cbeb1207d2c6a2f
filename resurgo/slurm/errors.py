"""One error hierarchy for everything that talks to Slurm (mapped once, at the command layer)."""

from __future__ import annotations


class SchedulerError(Exception):
    """A Slurm command did not do what was asked."""


class SchedulerUnavailable(SchedulerError):
    """slurmctld (or the SSH link to the login node) cannot be reached; retry later."""


class CommandTimeout(SchedulerError):
    """A Slurm command ran past its deadline and was killed."""


class CommandFailed(SchedulerError):
    """A Slurm command exited non-zero for a reason that is not one of the specific ones."""


class JobGone(SchedulerError):
    """slurmctld no longer knows the job (purged after MinJobAge, or never existed)."""


class ParseError(SchedulerError):
    """Slurm printed something the parsers do not understand; the message quotes it."""


class PreconditionFailed(SchedulerError):
    """The job is not in a state where the requested step makes sense."""


class ActionsNotAllowed(SchedulerError):
    """A gate (acknowledgement, partition allowlist) forbids scheduler actions."""


# ApplicationError.type names: used where raised and in RetryPolicy.non_retryable_error_types.
NON_RETRYABLE = ("JobGone", "PreconditionFailed", "ActionsNotAllowed", "ParseError")
