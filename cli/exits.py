"""The exit codes of every `resurgo` command, defined once.

| code | name        | meaning                                                              |
|------|-------------|----------------------------------------------------------------------|
| 0    | OK          | done                                                                 |
| 1    | FAILURE     | the command ran and the answer is "no": refused (409), contract not  |
|      |             | met, the watchdog found a problem                                    |
| 2    | USAGE       | bad arguments, options or config (nothing was started)               |
| 3    | NOT_FOUND   | what was asked for does not exist: job, audit store, bundle          |
| 4    | UNAVAILABLE | a service is down or failed: API, Temporal, audit database           |
| 5    | DENIED      | the API refused the token (401) or its role (403)                    |
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ExitCode"]


class ExitCode(IntEnum):
    OK = 0
    FAILURE = 1
    USAGE = 2
    NOT_FOUND = 3
    UNAVAILABLE = 4
    DENIED = 5
