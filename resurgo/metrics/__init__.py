"""Numbers about recoveries: the audit trail folded into counts and latencies (`digest`), read
incrementally from the store (`reader`) and served to Prometheus (`exporter`)."""
