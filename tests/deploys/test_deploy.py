"""Static checks of docker-compose.yml and the Dockerfile: no Docker engine needed.

PyYAML is not a dependency, so the compose file is written in a small YAML subset that
``load_yaml_subset`` (tests/support/compose.py) parses exactly and refuses anything outside of.
When a compose binary is on the PATH, ``docker-compose config`` validates the file as well; when a
system Python has PyYAML, the subset parser is checked against it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from temporalio.common import SearchAttributeIndexedValueType
from temporalio.envconfig import ClientConfig

from durable_agents.connection import SEARCH_ATTRIBUTES
from durable_agents.dev_server import temporal_cli
from durable_agents.settings import Settings
from tests.support.compose import COMPOSE_FILE, YamlSubsetError, interpolate, load_yaml_subset
from tests.support.paths import ROOT

DOCKERFILE = ROOT / "Dockerfile"


@pytest.fixture(scope="module")
def compose() -> dict:
    return load_yaml_subset(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def worker(compose: dict) -> dict:
    return compose["services"]["worker"]


def worker_environment(worker: dict, host: dict[str, str]) -> dict[str, str | None]:
    """The worker's environment as compose resolves it against the host's; None means passed through."""
    return {
        name: None if value is None else interpolate(str(value), host)
        for name, value in worker["environment"].items()
    }


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    instructions = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            instruction, _, arguments = line.partition(" ")
            instructions.append((instruction.upper(), arguments.strip()))
    return instructions


def names_the_code_reads_from_the_environment() -> set[str]:
    pattern = re.compile(
        r"""(?:os\.)?(?:environ\.get|getenv)\(\s*["'](\w+)["']"""
        r"""|os\.environ\[\s*["'](\w+)["']\s*\](?!\s*=[^=])"""
        r"""|["'](\w+)["']\s+(?:not\s+)?in\s+os\.environ"""
        # a provider adapter's key and base URL (activities/providers/_sdk.py reads them)
        r"""|\benvironment\s*=\s*\(\s*["'](\w+)["']\s*,\s*["'](\w+)["']\s*\)"""
    )
    names = set()
    for folder, subfolders, files in os.walk(ROOT):
        skipped = ("tests", "data", "workspace", "__pycache__")
        subfolders[:] = [d for d in subfolders if not d.startswith(".") and d not in skipped]
        for file in files:
            if file.endswith(".py"):
                for match in pattern.finditer(Path(folder, file).read_text()):
                    names |= {group for group in match.groups() if group}
    return names


def names_temporal_envconfig_reads(candidates: set[str]) -> set[str]:
    """The candidates whose value changes what ``ClientConfig.load_client_connect_config`` returns."""
    baseline = ClientConfig.load_client_connect_config(disable_file=True, override_env_vars={})
    return {
        name
        for name in candidates
        if ClientConfig.load_client_connect_config(
            disable_file=True, override_env_vars={name: "probe-value:7233"}
        )
        != baseline
    }


# ---------------------------------------------------------------------------------------------------
# The parser itself


def test_yaml_subset_parser_reads_mappings_sequences_scalars_and_literal_blocks() -> None:
    source = (
        "# comment\n"
        "a:\n"
        "  b: plain text  # trailing comment\n"
        '  c: "7233:7233"\n'
        "  d: 'it''s'\n"
        '  e: ["CMD", "x y"]\n'
        "  f:\n"
        "    - one\n"
        "    - 2\n"
        "  g:\n"
        "  h: true\n"
        "  script: |\n"
        "    line one\n"
        "      indented $$HOME\n"
        "\n"
        "    line three\n"
        "top: x:1\n"
    )
    assert load_yaml_subset(source) == {
        "a": {
            "b": "plain text",
            "c": "7233:7233",
            "d": "it's",
            "e": ["CMD", "x y"],
            "f": ["one", 2],
            "g": None,
            "h": True,
            "script": "line one\n  indented $$HOME\n\nline three\n",
        },
        "top": "x:1",
    }


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("restart: no\n", "line 1: quote the scalar 'no'"),
        ("ports:\n  - 22:22\n", "line 2: quote the scalar '22:22'"),
        ("a: &anchor x\n", "line 1: quote the scalar '&anchor x'"),
        ("a: 1\na: 2\n", "line 2: duplicate key 'a'"),
        ("a:\n\tb: 1\n", "line 2: tab in indentation"),
        ("a:\n  - b: 1\n", "line 2: mappings inside sequences are not supported"),
        ("a: 1\n   b: 2\n", "line 2: unexpected indentation"),
        ("a: 1.5\n", "line 1: quote the scalar '1.5'"),
    ],
)
def test_yaml_subset_parser_refuses_what_it_does_not_read_exactly(source: str, message: str) -> None:
    with pytest.raises(YamlSubsetError) as error:
        load_yaml_subset(source)
    assert str(error.value) == message


def test_interpolation_follows_compose_defaults_and_escapes() -> None:
    host = {"SET": "value", "EMPTY": ""}
    assert interpolate("${SET:-d} ${EMPTY:-d} ${EMPTY-d} ${UNSET-d} ${UNSET} $$SET $SET", host) == (
        "value d  d  $SET value"
    )


def _pythons_with_pyyaml() -> list[str]:
    found = []
    for candidate in ("/usr/bin/python3", shutil.which("python3")):
        if candidate and Path(candidate).exists() and candidate not in found:
            check = subprocess.run([candidate, "-c", "import yaml"], capture_output=True, timeout=30)
            if check.returncode == 0:
                found.append(candidate)
    return found


def test_compose_file_parses_to_the_same_document_with_pyyaml_when_a_system_python_has_it(
    compose: dict,
) -> None:
    pythons = _pythons_with_pyyaml()
    if not pythons:
        pytest.skip("no Python with PyYAML on this machine (PyYAML is not a project dependency)")
    code = "import json, sys, yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))"
    out = subprocess.run(
        [pythons[0], "-c", code, str(COMPOSE_FILE)], capture_output=True, text=True, timeout=30, check=True
    )
    assert json.loads(out.stdout) == compose


# ---------------------------------------------------------------------------------------------------
# docker-compose's own validation, where a compose binary exists


def _compose_command() -> list[str] | None:
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, timeout=30)
        if probe.returncode == 0:
            return ["docker", "compose"]
    return None


def test_docker_compose_config_accepts_the_file_and_lists_its_services_and_volumes() -> None:
    command = _compose_command()
    if command is None:
        pytest.skip("no docker-compose binary (Debian: apt-get install docker-compose)")
    base = [*command, "-f", str(COMPOSE_FILE)]
    # Only PATH: no host variable (TEMPORAL_NAMESPACE, POSTGRES_PASSWORD...) changes the result.
    environment = {"PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin")}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*base, *args], capture_output=True, text=True, timeout=60, env=environment, cwd=ROOT
        )

    quiet = run("config", "-q")
    assert (quiet.returncode, quiet.stderr) == (0, "")
    assert sorted(run("config", "--services").stdout.split()) == [
        "codec-server",
        "postgresql",
        "temporal",
        "temporal-admin-tools",
        "temporal-schema",
        "temporal-ui",
        "worker",
    ]
    assert sorted(run("config", "--volumes").stdout.split()) == ["postgres-data"]


# ---------------------------------------------------------------------------------------------------
# The deployment


def test_compose_runs_postgres_temporal_ui_admin_tools_worker_and_codec_server(compose: dict) -> None:
    assert list(compose) == ["services", "volumes"]
    assert list(compose["services"]) == [
        "postgresql",
        "temporal-schema",
        "temporal",
        "temporal-ui",
        "temporal-admin-tools",
        "worker",
        "codec-server",
    ]
    assert compose["volumes"] == {"postgres-data": None}


def test_every_image_is_pinned_to_a_version_tag(compose: dict) -> None:
    images = {name: service["image"] for name, service in compose["services"].items() if "image" in service}
    assert images == {
        "postgresql": "postgres:16.4",
        "temporal-schema": "temporalio/admin-tools:1.32.0",
        "temporal": "temporalio/server:1.32.0",
        "temporal-ui": "temporalio/ui:2.54.1",
        "temporal-admin-tools": "temporalio/admin-tools:1.32.0",
    }
    for image in images.values():
        tag = image.rpartition("/")[2].partition(":")[2]
        assert tag and tag != "latest" and "$" not in image, image
    # The admin tools come from the same server release as the server.
    assert images["temporal-admin-tools"].split(":")[1] == images["temporal"].split(":")[1]
    assert images["temporal-schema"] == images["temporal-admin-tools"]
    # Only the worker and the codec server are built; they have no image of their own to pin.
    assert [name for name, service in compose["services"].items() if "image" not in service] == [
        "worker",
        "codec-server",
    ]


def test_compose_runs_the_server_and_ui_lines_of_the_embedded_dev_server_and_no_auto_setup(
    compose: dict,
) -> None:
    """temporalio/auto-setup is no longer built: the server image, with admin-tools for the schema."""
    version = subprocess.run([temporal_cli(), "--version"], capture_output=True, text=True, timeout=30).stdout
    embedded = re.search(r"Server (\d+\.\d+)\.\d+, UI (\d+\.\d+)\.\d+", version)
    assert embedded, version
    images = [service.get("image", "") for service in compose["services"].values()]
    assert not [image for image in images if "auto-setup" in image]
    server = compose["services"]["temporal"]["image"].partition(":")[2]
    ui = compose["services"]["temporal-ui"]["image"].partition(":")[2]
    assert (server.rpartition(".")[0], ui.rpartition(".")[0]) == embedded.groups()


def test_temporal_persists_in_postgres_once_its_schema_is_set_up(compose: dict) -> None:
    services = compose["services"]
    temporal = services["temporal"]
    assert temporal["depends_on"] == {"temporal-schema": {"condition": "service_completed_successfully"}}
    assert temporal["healthcheck"]["test"] == ["CMD", "nc", "-z", "localhost", "7233"]
    environment = {name: interpolate(str(value), {}) for name, value in temporal["environment"].items()}
    assert environment == {
        "DB": "postgres12",
        "DB_PORT": "5432",
        "POSTGRES_SEEDS": "postgresql",
        "POSTGRES_USER": "temporal",
        "POSTGRES_PWD": "temporal",
        "BIND_ON_IP": "0.0.0.0",
    }
    postgres = services["postgresql"]
    assert postgres["healthcheck"]["test"] == ["CMD-SHELL", "pg_isready -U temporal"]
    assert postgres["volumes"] == ["postgres-data:/var/lib/postgresql/data"]
    assert interpolate(postgres["environment"]["POSTGRES_PASSWORD"], {}) == environment["POSTGRES_PWD"]
    assert interpolate(postgres["environment"]["POSTGRES_PASSWORD"], {"POSTGRES_PASSWORD": "s3"}) == "s3"
    assert interpolate(temporal["environment"]["POSTGRES_PWD"], {"POSTGRES_PASSWORD": "s3"}) == "s3"


def test_published_ports_are_grpc_web_ui_and_codec_server_on_localhost(compose: dict) -> None:
    ports = {name: service["ports"] for name, service in compose["services"].items() if "ports" in service}
    assert ports == {
        "temporal": ["127.0.0.1:7233:7233"],
        "temporal-ui": ["127.0.0.1:8233:8080"],
        "codec-server": ["127.0.0.1:8081:8081"],
    }
    assert compose["services"]["temporal-ui"]["environment"] == {
        "TEMPORAL_ADDRESS": "temporal:7233",
        "TEMPORAL_CODEC_ENDPOINT": "http://localhost:8081",
    }


def test_worker_builds_from_the_dockerfile_and_runs_worker_py(worker: dict) -> None:
    assert worker["build"] == {"context": ".", "dockerfile": "Dockerfile"}
    assert DOCKERFILE.is_file()
    assert worker["command"] == ["python", "worker.py"]
    assert (ROOT / "worker.py").is_file()


def test_worker_can_be_scaled_no_container_name_and_no_host_ports(worker: dict) -> None:
    assert "container_name" not in worker
    assert "ports" not in worker
    assert "image" not in worker


def test_worker_starts_after_the_search_attributes_are_registered(worker: dict) -> None:
    assert worker["depends_on"] == {"temporal-admin-tools": {"condition": "service_completed_successfully"}}
    assert worker["restart"] == "unless-stopped"


def test_worker_environment_resolves_to_the_compose_network_and_the_data_volume(worker: dict) -> None:
    assert worker_environment(worker, host={}) == {
        "TEMPORAL_ADDRESS": "temporal:7233",
        "TEMPORAL_NAMESPACE": "default",
        "AGENT_TASK_QUEUE": "agents",
        "AGENT_DATABASE_URL": "postgresql://temporal:temporal@postgresql:5432/agents",
        "OPENAI_API_KEY": None,
        "OPENAI_BASE_URL": None,
        "ANTHROPIC_API_KEY": None,
        "ANTHROPIC_BASE_URL": None,
        "AGENT_ENCRYPTION_KEY": None,
    }
    host = {"TEMPORAL_NAMESPACE": "prod", "AGENT_TASK_QUEUE": "agents-prod"}
    resolved = worker_environment(worker, host=host)
    assert (resolved["TEMPORAL_NAMESPACE"], resolved["AGENT_TASK_QUEUE"]) == ("prod", "agents-prod")


def test_worker_keeps_its_state_in_the_agents_database_not_on_a_volume(compose: dict, worker: dict) -> None:
    assert "volumes" not in worker
    environment = worker_environment(worker, host={"POSTGRES_PASSWORD": "s3"})
    assert not [
        name for name in environment if name.endswith(("_STORE", "_DIR")) or name == "AGENT_WORKSPACE"
    ]
    settings = Settings.from_env({k: v for k, v in environment.items() if v is not None}).stores
    assert settings.shared
    assert settings.database_url == "postgresql://temporal:s3@postgresql:5432/agents"
    # The compose setup creates that database; the workers create its tables.
    script = interpolate(compose["services"]["temporal-schema"]["command"][0], {})
    assert "for db in temporal temporal_visibility agents; do" in script


def test_provider_keys_are_passed_through_from_the_host_never_written_in_the_file(worker: dict) -> None:
    providers = ["OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"]
    assert {name: worker["environment"][name] for name in providers} == dict.fromkeys(providers)


def test_every_variable_the_worker_sets_is_read_by_the_code_or_by_temporal_envconfig(worker: dict) -> None:
    set_by_compose = set(worker["environment"])
    read_by_code = names_the_code_reads_from_the_environment()
    assert {"TEMPORAL_ADDRESS", "AGENT_TASK_QUEUE", "AGENT_DATABASE_URL", "AGENT_STORE"} <= read_by_code
    temporal_names = {name for name in set_by_compose if name.startswith("TEMPORAL_")}
    read_by_envconfig = names_temporal_envconfig_reads(temporal_names)
    assert read_by_envconfig == {"TEMPORAL_ADDRESS", "TEMPORAL_NAMESPACE"}
    assert set_by_compose - read_by_code - read_by_envconfig == set()


def test_worker_temporal_settings_give_the_connect_config_for_the_compose_server(worker: dict) -> None:
    environment = worker_environment(worker, host={})
    temporal_vars = {name: value for name, value in environment.items() if name.startswith("TEMPORAL_")}
    config = ClientConfig.load_client_connect_config(disable_file=True, override_env_vars=temporal_vars)
    assert (config["target_host"], config["namespace"]) == ("temporal:7233", "default")


def test_namespace_is_the_same_for_server_admin_tools_and_worker(compose: dict) -> None:
    services = compose["services"]
    for host in ({}, {"TEMPORAL_NAMESPACE": "prod"}):
        namespaces = {
            interpolate(services["temporal-admin-tools"]["environment"]["TEMPORAL_NAMESPACE"], host),
            interpolate(services["worker"]["environment"]["TEMPORAL_NAMESPACE"], host),
        }
        assert namespaces == {host.get("TEMPORAL_NAMESPACE", "default")}
    # The server image creates no namespace: admin-tools does, unless it exists.
    assert (
        'namespace describe --namespace "$TEMPORAL_NAMESPACE" >/dev/null 2>&1 || '
        'temporal operator namespace create --namespace "$TEMPORAL_NAMESPACE"'
    ) in admin_tools_script(compose)


# ---------------------------------------------------------------------------------------------------
# The admin tools one-shot


def admin_tools_script(compose: dict) -> str:
    service = compose["services"]["temporal-admin-tools"]
    assert service["entrypoint"] == ["/bin/sh", "-ec"]  # the image's own entrypoint sleeps forever
    (script,) = service["command"]
    return interpolate(script, {})


_CLI_TYPES = {
    SearchAttributeIndexedValueType.KEYWORD: "Keyword",
    SearchAttributeIndexedValueType.TEXT: "Text",
    SearchAttributeIndexedValueType.INT: "Int",
    SearchAttributeIndexedValueType.DOUBLE: "Double",
    SearchAttributeIndexedValueType.BOOL: "Bool",
    SearchAttributeIndexedValueType.DATETIME: "Datetime",
    SearchAttributeIndexedValueType.KEYWORD_LIST: "KeywordList",
}


def test_admin_tools_create_exactly_the_search_attributes_of_connection(compose: dict) -> None:
    script = admin_tools_script(compose)
    created: dict[str, str] = {}
    for command in re.findall(r"temporal operator search-attribute create\b([^\n]*)", script):
        for name, kind in re.findall(r"--name (\w+) --type (\w+)", command):
            assert name not in created, f"{name} created twice"
            created[name] = kind
    assert created == {key.name: _CLI_TYPES[key.indexed_value_type] for key in SEARCH_ATTRIBUTES}
    assert created == {
        "AgentStatus": "Keyword",
        "AgentName": "Keyword",
        "AgentParent": "Keyword",
        "AgentForkOf": "Keyword",
        "AgentTenant": "Keyword",
        "AgentUser": "Keyword",
        "AgentCost": "Double",
        "AgentPromptWords": "KeywordList",
    }
    # Each create is skipped when the attribute exists, so a rerun succeeds.
    assert re.findall(r"grep -qw (\w+) \|\| temporal operator search-attribute create", script) == [
        "AgentStatus",
        "AgentName",
        "AgentParent",
        "AgentForkOf",
        "AgentTenant",
        "AgentUser",
        "AgentCost",
        "AgentPromptWords",
    ]


def test_admin_tools_is_a_one_shot_against_the_compose_server(compose: dict) -> None:
    service = compose["services"]["temporal-admin-tools"]
    assert service["depends_on"] == {"temporal": {"condition": "service_healthy"}}
    assert service["restart"] == "on-failure"
    environment = {name: interpolate(str(value), {}) for name, value in service["environment"].items()}
    assert environment == {"TEMPORAL_ADDRESS": "temporal:7233", "TEMPORAL_NAMESPACE": "default"}
    script = admin_tools_script(compose)
    assert script.startswith("until temporal operator cluster health; do")
    assert "sleep infinity" not in script


def test_schema_one_shot_creates_and_upgrades_both_temporal_databases_after_postgres_is_healthy(
    compose: dict,
) -> None:
    service = compose["services"]["temporal-schema"]
    assert service["depends_on"] == {"postgresql": {"condition": "service_healthy"}}
    assert (service["entrypoint"], service["restart"]) == (["/bin/sh", "-ec"], "on-failure")
    assert interpolate(service["environment"]["SQL_PASSWORD"], {"POSTGRES_PASSWORD": "s3"}) == "s3"
    script = interpolate(service["command"][0], {})
    for database, schema in (("temporal", "temporal"), ("temporal_visibility", "visibility")):
        assert f"sql --db {database} setup-schema -v 0.0\n" in script
        assert (
            f"sql --db {database} update-schema -d /etc/temporal/schema/postgresql/v12/{schema}/versioned"
            in script
        )
    # A database that exists is not an error: the one-shot may run again on the same volume.
    assert 'sql --db "$db" create || echo "database $db exists"' in script


def test_admin_tools_script_is_valid_shell() -> None:
    sh = shutil.which("sh")
    if sh is None:
        pytest.skip("no sh")
    compose = load_yaml_subset(COMPOSE_FILE.read_text())
    for script in (
        admin_tools_script(compose),
        interpolate(compose["services"]["temporal-schema"]["command"][0], {}),
    ):
        checked = subprocess.run([sh, "-n", "-c", script], capture_output=True, text=True, timeout=30)
        assert (checked.returncode, checked.stderr) == (0, "")


# ---------------------------------------------------------------------------------------------------
# The Dockerfile


def test_dockerfile_is_python_311_slim_installs_the_lock_file_and_runs_worker_py(worker: dict) -> None:
    instructions = dockerfile_instructions()
    assert [args for op, args in instructions if op == "FROM"] == ["python:3.11-slim-bookworm"]
    assert [args for op, args in instructions if op == "RUN" and "pip install" in args] == [
        "pip install -r requirements.lock",
        "pip install --no-deps -e .",
    ]
    (cmd,) = [json.loads(args) for op, args in instructions if op == "CMD"]
    assert cmd == ["python", "worker.py"]
    assert cmd == worker["command"]
    copies = [args for op, args in instructions if op == "COPY"]
    assert copies == ["requirements.lock ./", ". ."]  # dependencies before code: code edits reuse the layer


def test_dockerfile_compiles_every_package_the_worker_imports() -> None:
    """The app runs as a user who cannot write bytecode: a package left out is compiled at every
    start and its imports are slower (``durable_agents`` was, until 2026-11)."""
    (compileall,) = [args for op, args in dockerfile_instructions() if op == "RUN" and "compileall" in args]
    compiled = set(compileall.split()[compileall.split().index("-q") + 1 :])
    packages = {p.parent.name for p in ROOT.glob("*/__init__.py")} - {"tests", "bench"}
    assert packages == {"workflows", "activities", "durable_agents"}
    assert compiled == packages | {"*.py"}


def test_dockerfile_runs_as_a_non_root_user() -> None:
    instructions = dockerfile_instructions()
    users = [args for op, args in instructions if op == "USER"]
    assert users == ["agent"]
    # USER comes after every RUN, so nothing after it needs root.
    last_run = max(i for i, (op, _) in enumerate(instructions) if op == "RUN")
    assert [op for op, _ in instructions].index("USER") > last_run
    (useradd,) = [args for op, args in instructions if op == "RUN" and "useradd" in args]
    assert "--uid 10001" in useradd and "chown -R agent:agent /data" in useradd
    # Relative defaults (data/..., workspace) resolve from /app into the volume too.
    assert "ln -s /data /app/data" in useradd and "ln -s /data/workspace /app/workspace" in useradd
    assert [args for op, args in dockerfile_instructions() if op == "WORKDIR"] == ["/app"]


def test_dockerfile_defaults_keep_worker_data_under_data() -> None:
    env_args = " ".join(args for op, args in dockerfile_instructions() if op == "ENV")
    defaults = dict(re.findall(r"(AGENT_\w+)=(\S+)", env_args))
    assert defaults == {
        "AGENT_DATA_DIR": "/data",
        "AGENT_STORE": "/data/conversations.db",
        "AGENT_PAYLOAD_STORE": "/data/payloads.db",
        "AGENT_IDEMPOTENCY_STORE": "/data/idempotency.db",
        "AGENT_WORKSPACE": "/data/workspace",
    }


def test_dockerignore_keeps_local_state_out_of_the_image() -> None:
    ignored = [line for line in (ROOT / ".dockerignore").read_text().splitlines() if line]
    for entry in (".git", ".venv", "data", "workspace", "*.db", ".env"):
        assert entry in ignored
