"""Job 1, deployment: Lua files -> a registry -> calls and pipelines -> deploy and drift."""
