"""The one error root: every error Resurgo raises on purpose derives from `ResurgoError`, and is
either transient (retrying later may succeed) or permanent (it will not, until something
changes).

Activities turn a `PermanentError` into a non-retryable Temporal failure typed by the class
name (`resurgo.activities.errors`), and the workflow's retry policies list the same names,
derived here once from the class tree, so the two can never drift apart.
"""

from __future__ import annotations


class ResurgoError(Exception):
    """Base of every error Resurgo raises on purpose; the message says what and why."""


class TransientError(ResurgoError):
    """Retrying later may succeed: a service is down, slow or overloaded."""


class PermanentError(ResurgoError):
    """Retrying cannot help until a person or the world changes something."""


def permanent_error_types() -> tuple[str, ...]:
    """Class names of every `PermanentError` defined so far (the Temporal failure types).

    Imports the modules that define them, so the answer does not depend on import order.
    """
    import resurgo.attribute.bundle
    import resurgo.audit.errors
    import resurgo.config
    import resurgo.policy.replay
    import resurgo.slurm.errors
    import resurgo.slurm.snapshot
    import resurgo.sources.errors  # noqa: F401

    names: set[str] = set()
    pending: list[type[BaseException]] = [PermanentError]
    while pending:
        cls = pending.pop()
        names.add(cls.__name__)
        pending.extend(cls.__subclasses__())
    names.discard(PermanentError.__name__)
    return tuple(sorted(names))
