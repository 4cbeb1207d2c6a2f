"""Node health: the ledger of what Resurgo blamed on each node, lemon detection, and the
pure parts of validated return to service."""
