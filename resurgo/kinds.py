"""The kinds every Resurgo model is made of (mode, anomaly, root-cause category, advice,
scheduler step). Re-exported by `resurgo.contracts`, where every caller imports them from."""

from __future__ import annotations

from enum import StrEnum


class Mode(StrEnum):
    OBSERVE = "observe"
    ACTION = "action"


class AnomalyKind(StrEnum):
    CRASH = "crash"
    HANG = "hang"
    STRAGGLER = "straggler"


class Category(StrEnum):
    HARDWARE_GPU = "hardware_gpu"
    HARDWARE_NETWORK = "hardware_network"
    HARDWARE_HOST = "hardware_host"
    SYSTEM_SOFTWARE = "system_software"
    APPLICATION = "application"
    SCHEDULER = "scheduler"
    UNKNOWN = "unknown"
    NONE = "none"


HARDWARE_CATEGORIES = frozenset(
    {Category.HARDWARE_GPU, Category.HARDWARE_NETWORK, Category.HARDWARE_HOST}
)


class AdviceKind(StrEnum):
    REQUEUE = "requeue"
    REQUEUE_EXCLUDING = "requeue_excluding"
    STOP = "stop"
    NONE = "none"


class ActionStep(StrEnum):
    REQUEUE_HOLD = "requeue_hold"
    EXCLUDE_NODES = "exclude_nodes"
    RELEASE = "release"
    CANCEL = "cancel"
    DRAIN_NODE = "drain_node"
