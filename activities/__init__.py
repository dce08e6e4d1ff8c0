"""Activities: everything the agent loop does outside the workflow, one module per concern.

- ``agent_resolution``: ``resolve_agent``, the agent a conversation names or brings inline.
- ``model_activity``: ``call_model``, the transcript from the store, then the provider
  (``providers/``, whose retries ``errors`` decides); ``text_deltas`` streams its text.
- ``tool_activity``: ``run_tool``, a registry tool (``tools/``) or an MCP server's (``mcp``).
- ``mcp_activity``: ``list_mcp_tools`` and the worker's MCP pool, made on first use.
- ``hooks``: ``run_hook`` and the hooks themselves; ``approver_keys``: ``verify_decision``.
- ``agent_files`` and ``models`` (each model's context window and prices): what the worker loads at start.
- ``delta_channel``: text deltas from a model call to the stream clients, beside history.
- ``assembly``: ``AgentActivities``, all of them built from one worker's collaborators.

The stores they use live in the ``stores`` package.
"""
