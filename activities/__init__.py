"""Activities: everything the agent loop does outside the workflow, one module per concern.

- ``agent_resolution``: ``resolve_agent``, the agent a conversation names or brings inline.
- ``model_call``: ``call_model``, the transcript from the store, then the provider (``providers/``).
- ``tool_calls``: ``run_tool``, a registry tool (``tools/``) or an MCP server's (``mcp``).
- ``mcp_activity``: ``list_mcp_tools`` and the worker's MCP pool, made on first use.
- ``hooks``: ``run_hook`` and the hooks themselves.
- ``agent_files`` and ``models``: the agent files and the models table (context windows, prices),
  loaded at worker start.
- ``agent``: ``AgentActivities``, all five built from one worker's collaborators.
"""
