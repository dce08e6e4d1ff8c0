"""The agent workflow and the types it shares with activities, CLI and tests."""
