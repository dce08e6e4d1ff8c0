"""Activities: model calls through provider adapters, tool runs, agent resolution."""
