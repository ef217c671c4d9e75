"""Benchmarking: the embedded server, the RTT proxy, the runner and statistics."""
