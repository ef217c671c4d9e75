"""The only I/O: what is sent, at most once, to which node (replies, retry policy, cluster
routing rules, the sync and asyncio drivers, connecting from a URL)."""
