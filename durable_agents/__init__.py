"""The library beside the workflow and its activities: reaching Temporal (connection, converter,
codec, dev server), telemetry, settings, the worker plugin and the client-side helpers.

Nothing is imported here: ``from durable_agents.plugin import AgentPlugin``.
"""
