"""Bad input gets a clear error and loses nothing. One test per kind; where each lives:

- start input failing validation: here; test_loop.test_invalid_start_input_fails_the_workflow_with_the_reason
- agent name that does not exist: test_loop.test_unknown_agent_fails_the_workflow_not_the_task
- bad agent file: here (worker refuses to start); test_tools.test_bad_agent_file_error_names_file_and_field
- bad models table (AGENT_MODELS, AGENT_PRICES): here (worker refuses to start);
  test_models_table.test_a_bad_file_is_one_line_naming_the_file_model_and_field
- oversized prompt: here
- signals with wrong shapes: test_approvals.test_malformed_signal_is_dropped_and_the_conversation_goes_on
- queries on unknown workflow ids: test_starter.test_unknown_conversation_is_one_clear_line
- a tool returning a non-serialisable value:
  test_loop.TestCustomTools.test_non_serialisable_tool_result_is_reported_to_model
- a model naming a tool outside the agent's allowlist:
  test_loop.test_tool_outside_allowlist_is_unknown_even_if_worker_has_it
- a provider 400: test_providers_e2e.test_provider_400_fails_the_conversation_without_retrying
- timeouts, deadlines and retry settings out of range:
  test_tools.test_timeouts_and_deadlines_out_of_range_are_rejected
- a hook answering nonsense: test_hooks.test_a_hook_answering_nonsense_blocks_the_call
- an MCP server that cannot start, or a missing ${VAR}:
  test_mcp.test_a_server_that_cannot_start_fails_the_call_not_the_worker,
  test_mcp.test_missing_environment_variable_is_named
- MCP tool errors and unknown MCP tools: test_mcp.test_tool_errors_from_the_server_go_back_to_the_model
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from temporalio.client import WorkflowFailureError

from durable_agents.workflows.api import ConversationInput
from durable_agents.workflows.config import MAX_PROMPT_CHARS
from tests.support.paths import ROOT
from tests.support.workers import Env


def test_oversized_prompt_is_refused_before_anything_starts() -> None:
    with pytest.raises(ValidationError, match=f"String should have at most {MAX_PROMPT_CHARS} characters"):
        ConversationInput(prompt="x" * (MAX_PROMPT_CHARS + 1), agent="demo")


async def test_oversized_prompt_sent_raw_fails_the_workflow_clearly(env: Env) -> None:
    handle = await env.client.start_workflow(
        "AgentWorkflow",
        {"prompt": "x" * (MAX_PROMPT_CHARS + 1), "agent": "demo"},
        id="huge",
        task_queue=env.task_queue,
    )
    with pytest.raises(WorkflowFailureError) as info:
        await handle.result()
    assert f"String should have at most {MAX_PROMPT_CHARS} characters" in info.value.cause.message


def test_start_input_naming_no_agent_is_refused() -> None:
    with pytest.raises(ValidationError, match="give exactly one of 'agent'"):
        ConversationInput(prompt="hi")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('tools = ["add"]\n[model]\nprovider = "scripted"\n', "field 'model.model': Field required"),
        (
            '[model]\nprovider = "openai"\nmodel = "gpt-4o-mini"\nmax_tokens = 100_000\n',
            "field 'model.max_tokens': 100000 is more than gpt-4o-mini writes (16384 tokens at most,"
            " in the models table)",
        ),
    ],
    ids=["no-model-name", "max-tokens-past-the-models-limit"],
)
def test_worker_refuses_to_start_on_a_bad_agent_file(tmp_path: Path, text: str, error: str) -> None:
    (tmp_path / "broken.toml").write_text(text)
    done = subprocess.run(
        [sys.executable, "worker.py", "--agents-dir", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == f"worker: {tmp_path / 'broken.toml'}: {error}"


@pytest.mark.parametrize("variable", ["AGENT_MODELS", "AGENT_PRICES"])
def test_worker_refuses_to_start_on_a_bad_models_table(tmp_path: Path, variable: str) -> None:
    table = tmp_path / "models.toml"
    table.write_text('["gpt-x"]\ninput = 1\n')
    done = subprocess.run(
        [sys.executable, "worker.py"],
        cwd=ROOT,
        env={**os.environ, variable: str(table)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"worker: {table}: field 'gpt-x': Value error, give both prices, 'input' and 'output', or neither"
    )
