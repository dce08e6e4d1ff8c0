"""The operator console: every conversation and every call waiting for a person, decided and watched
live in a browser, served by ``starter.py serve`` at ``/console/`` beside the event streams
(docs/console.md). Server-rendered Jinja2 templates and htmx (vendored under ``static/``, with its
licence); no build step."""

from durable_agents.serve.console.routes import BASE, is_console, mount

__all__ = ["BASE", "is_console", "mount"]
