"""Judges: an agent's approvals decided by rules or by a model before a person does.

An agent's ``[[approval.judges]]`` name, for some of its tools, a ``rules`` judge (conditions over
the call's arguments, evaluated here, in the workflow: no activity, no code from the agent file) or
a ``model`` judge (the ``judge`` activity: a model reads the tool's description, the arguments and
the latest messages, and answers approve, deny or escalate with a reason).

A call that waits for approval is shown to people at once (``approval_requested``) and judged
meanwhile, by its tool's judges in order: the first that approves (or denies, when its denial is
``final``) decides the call, recorded as a person's decision is (``via`` ``judge``, ``by`` its
name, its reason; the model and tokens of a model judge in the record's ``judgements``). One that
escalates (unsure, or a denial that is not final) leaves its opinion on the record, where
``pending_approvals`` shows it, and the next judge, or a person, decides. A judge that fails, times
out, or has spent its calls escalates: judges fail closed. Judge and person race: whoever decides
first wins; a judge's opinion that comes later is kept with ``too_late``, a person's decision that
comes later is refused and kept in the record's ``late``. A model judge's tokens count in the
conversation's usage (its token and cost budgets), and a spent budget escalates unjudged. Its call
is counted in the shared ledger as a model call is (the tenant's and user's budgets at the judge's
model's price, the provider's limits): a refusal there escalates too.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError

from durable_agents.workflows import tenancy
from durable_agents.workflows.activity_io import JudgeAnswer, JudgeInput, ResolvedAgent, ToolSpec
from durable_agents.workflows.activity_refs import JUDGE, conversation_key, failure_text
from durable_agents.workflows.config import AgentSpec, JudgeConfig, Rule
from durable_agents.workflows.decisions import Judged
from durable_agents.workflows.events import ApprovalDecided, ApprovalJudged, ConversationEvents
from durable_agents.workflows.messages import Message
from durable_agents.workflows.records import ApprovalRecord, Judgement
from durable_agents.workflows.state import ConversationState

_MISSING = object()


# -- rules ----------------------------------------------------------------------------------------


def rules_verdict(rules: list[Rule], arguments: dict[str, Any]) -> tuple[str, str]:
    """``("approve", why)`` when every rule holds, else ``("escalate", the first that does not)``."""
    for rule in rules:
        if (problem := _breaks(rule, arguments)) is not None:
            return "escalate", problem
    return "approve", f"{len(rules)} rule(s) hold"


def _breaks(rule: Rule, arguments: dict[str, Any]) -> str | None:
    value = _at(arguments, rule.argument)
    name = rule.argument
    if value is _MISSING:
        return f"{name} is not given"
    if "equals" in rule.model_fields_set and value != rule.equals:
        return f"{name} is {json.dumps(value)}, not {json.dumps(rule.equals)}"
    if rule.one_of is not None:
        items = value if isinstance(value, list) else [value]
        if outside := [item for item in items if item not in rule.one_of]:
            return f"{name}: {json.dumps(outside[0])} is not one of {json.dumps(rule.one_of)}"
    if rule.min is not None or rule.max is not None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return f"{name} is not a number"
        if rule.min is not None and value < rule.min:
            return f"{name} is {value:g}, below {rule.min:g}"
        if rule.max is not None and value > rule.max:
            return f"{name} is {value:g}, above {rule.max:g}"
    if rule.glob is not None and (not isinstance(value, str) or not path_matches(value, rule.glob)):
        return f"{name} {json.dumps(value)} does not match {rule.glob}"
    if rule.excludes is not None and (not isinstance(value, str) or re.search(rule.excludes, value)):
        return f"{name} matches {rule.excludes}"  # not the match itself: it may be what must not show
    return None


def _at(arguments: dict[str, Any], path: str) -> Any:
    value: Any = arguments
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return _MISSING
        value = value[part]
    return value


def path_matches(path: str, glob: str) -> bool:
    """``*`` and ``?`` within one folder, ``**`` across folders; a path that climbs (``..``) or is
    absolute never matches."""
    parts = path.replace("\\", "/").split("/")
    if path.startswith("/") or ".." in parts:
        return False
    pattern = ""
    i = 0
    while i < len(glob):
        if glob.startswith("**/", i):
            pattern, i = pattern + "(?:.*/)?", i + 3
        elif glob.startswith("**", i):
            pattern, i = pattern + ".*", i + 2
        elif glob[i] == "*":
            pattern, i = pattern + "[^/]*", i + 1
        elif glob[i] == "?":
            pattern, i = pattern + "[^/]", i + 1
        else:
            pattern, i = pattern + re.escape(glob[i]), i + 1
    return re.fullmatch(pattern, path.replace("\\", "/")) is not None


# -- the judges of one conversation ---------------------------------------------------------------


class Judges:
    """Runs the judges of a conversation's waiting calls, each call's in a task of its own."""

    def __init__(
        self,
        state: ConversationState,
        events: ConversationEvents,
        records: Callable[[], dict[str, ApprovalRecord]],
        holding: Callable[[], AbstractContextManager[None]],
        counted: Callable[[], None],
    ) -> None:
        """``holding``: no continue-as-new while a judge runs; ``counted``: the usage changed."""
        self._s = state
        self._events = events
        self._records = records
        self._holding = holding
        self._counted = counted
        self._tasks: list[asyncio.Task[None]] = []

    def start(self, agent: ResolvedAgent, tool: ToolSpec, record: ApprovalRecord) -> None:
        """Judge ``record``'s call, if its tool has judges and none has judged it yet (a call carried
        to a new run was judged in the run before: a continue-as-new waits for its judges)."""
        judges = agent.spec.approval.judges_for(record.tool)
        if judges and record.state == "pending" and not record.judgements:
            self._tasks.append(asyncio.create_task(self._judge(agent, judges, tool, record)))

    @property
    def running(self) -> bool:
        return any(not task.done() for task in self._tasks)

    def cancel(self) -> None:
        for task in self._tasks:
            task.cancel()

    async def _judge(
        self, agent: ResolvedAgent, judges: list[JudgeConfig], tool: ToolSpec, record: ApprovalRecord
    ) -> None:
        with self._holding():
            for judge in judges:
                if record.state != "pending":
                    return
                opinion = await self._opinion(agent, judge, tool, record)
                opinion.too_late = record.state != "pending"
                record.judgements.append(opinion)
                if opinion.usage is not None:
                    self._s.usage += opinion.usage
                    self._counted()
                final = opinion.verdict == "approve" or (
                    opinion.verdict == "deny" and judge.on_deny == "final"
                )
                if opinion.too_late:
                    workflow.logger.info("judge %s came too late for %s", judge.name, record.call_id)
                    return
                if final:
                    Judged(judge.name, opinion.verdict == "approve", opinion.reason).take(
                        record, workflow.now()
                    )
                    self._events.publish(ApprovalDecided(record=record))
                    return
                self._events.publish(ApprovalJudged(record=record))

    async def _opinion(
        self, agent: ResolvedAgent, judge: JudgeConfig, tool: ToolSpec, record: ApprovalRecord
    ) -> Judgement:
        if judge.kind == "rules":
            verdict, reason = rules_verdict(judge.rules, record.arguments)
            return Judgement(
                judge=judge.name, kind="rules", verdict=verdict, reason=reason, at=workflow.now()
            )  # type: ignore[arg-type]
        assert judge.model is not None
        model = judge.model.label
        spec = agent.spec
        if (spent := self._spent(spec, judge)) is not None:
            return Judgement(
                judge=judge.name,
                kind="model",
                verdict="escalate",
                reason=spent,
                at=workflow.now(),
                model=model,
            )
        transcript = self._s.messages[-judge.transcript_messages :] if judge.transcript_messages else []
        owner = tenancy.current()
        try:
            answer: JudgeAnswer = await JUDGE.execute(
                JudgeInput(
                    judge=judge,
                    tool=tool.definition.name,
                    description=tool.definition.description,
                    arguments=record.arguments,
                    transcript=list(_briefly(transcript)),
                    conversation_key=conversation_key(),
                    tenant=owner.tenant,
                    user=owner.user,
                    price=agent.judge_prices.get(model),
                ),
                task_queue=spec.model_task_queue,
                summary=f"judge {judge.name}: {record.tool} ({record.call_id})",
                **judge.call.activity_options(),
            )
        except ActivityError as err:  # fails closed: a person decides
            refused = tenancy.refusal(err)
            return Judgement(
                judge=judge.name,
                kind="model",
                verdict="escalate",
                reason=f"the judge was not asked: {refused.text}"
                if refused
                else f"the judge failed: {failure_text(err)}",
                at=workflow.now(),
                model=model,
            )
        return Judgement(
            judge=judge.name,
            kind="model",
            verdict=answer.verdict,
            reason=answer.reason,
            at=workflow.now(),
            model=answer.model or model,
            usage=answer.usage,
        )

    def _spent(self, spec: AgentSpec, judge: JudgeConfig) -> str | None:
        """Why the judge may not be asked (its calls, or the conversation's token budget, spent)."""
        calls = sum(
            1 for r in self._records().values() for j in r.judgements if j.judge == judge.name and j.usage
        )
        if calls >= judge.max_calls:
            return f"the judge has made its {judge.max_calls} calls for this conversation"
        if spec.token_budget is not None and self._s.usage.total_tokens >= spec.token_budget:
            return f"the conversation's token budget of {spec.token_budget} is spent"
        return None


def _briefly(messages: list[Message], limit: int = 2000) -> Iterator[Message]:
    """The messages with long texts cut: a judge needs the gist, and each is in history."""
    for message in messages:
        text = getattr(message, "text", None) or getattr(message, "content", None)
        field = "text" if getattr(message, "text", None) else "content"
        if isinstance(text, str) and len(text) > limit:
            yield message.model_copy(update={field: text[:limit] + " [...]"})
        else:
            yield message
