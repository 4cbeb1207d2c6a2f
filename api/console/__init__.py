"""The Recovery Console: the operators' web page, served by `resurgo api` at `/console`."""
