"""The Grafana dashboard and the metrics table of docs/production.md name exactly the metrics the
worker records, and the dashboard imports into any Grafana with a Prometheus data source."""

from __future__ import annotations

import json
import re

from tests.support.paths import ROOT

DASHBOARD = ROOT / "docs" / "grafana" / "durable-agents.json"
_OURS = re.compile(r"\bdurable_agents_[a-z_]+")


def _recorded() -> set[str]:
    """The metrics the worker records: each name given to an instrument in durable_agents/worker/."""
    code = "".join(p.read_text() for p in (ROOT / "durable_agents" / "worker").glob("*.py"))
    return set(re.findall(r'"(durable_agents_[a-z_]+)"', code))


def _named(text: str) -> set[str]:
    return {re.sub(r"_(bucket|sum|count)$", "", name) for name in _OURS.findall(text)}


def _queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]


def test_the_dashboard_and_the_docs_name_every_metric_the_worker_records_and_no_other() -> None:
    recorded = _recorded()
    docs = (ROOT / "docs" / "production.md").read_text()
    table = docs[docs.index("### Metrics") : docs.index("### The dashboard")]
    assert (_named(" ".join(_queries())), _named(table)) == (recorded, recorded)


def test_every_panel_queries_the_data_source_chosen_on_import() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    [variable] = [v for v in dashboard["templating"]["list"] if v["type"] == "datasource"]
    assert (variable["name"], variable["query"]) == ("datasource", "prometheus")
    sources = {json.dumps(t["datasource"]) for p in dashboard["panels"] for t in p.get("targets", [])}
    assert sources == {json.dumps({"type": "prometheus", "uid": "${datasource}"})}
