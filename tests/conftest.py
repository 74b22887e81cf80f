"""One real Temporal dev server for the session; real worker processes per test."""

from __future__ import annotations

import os
import sys
from collections.abc import AsyncIterator, Generator, Iterator
from pathlib import Path

import pytest
from temporalio.client import Client
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from durable_turns.contract import SEARCH_ATTRIBUTES
from durable_turns.devserver import FAST_DYNAMIC_CONFIG, temporal_binary
from testkit.llm_server import LLMServer
from tests.support.diagnose import explain
from tests.support.harness import Harness, compile_sources
from tests.support.web import door  # noqa: F401 (the front door's fixture, for every test file)

# Conversations are told to continue-as-new after 60 history events (production: 4,096), so
# every multi-turn test also exercises the hand-over.
TEST_DYNAMIC_CONFIG = [*FAST_DYNAMIC_CONFIG, "limit.historyCount.suggestContinueAsNew=60"]


def pytest_sessionstart(session: pytest.Session) -> None:
    if "PYTEST_XDIST_WORKER" not in os.environ:  # once, in the process that starts the others
        compile_sources()  # before the first worker process starts


@pytest.fixture(scope="session")
async def temporal_env() -> AsyncIterator[WorkflowEnvironment]:
    extra: list[str] = []
    for value in TEST_DYNAMIC_CONFIG:
        extra += ["--dynamic-config-value", value]
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=temporal_binary(),
        data_converter=pydantic_data_converter,
        search_attributes=SEARCH_ATTRIBUTES,
        dev_server_extra_args=extra,
    )
    try:
        yield env
    finally:
        await env.shutdown()


@pytest.fixture(scope="session")
def client(temporal_env: WorkflowEnvironment) -> Client:
    return temporal_env.client


@pytest.fixture(scope="session")
def temporal_address(client: Client) -> str:
    return client.service_client.config.target_host


@pytest.fixture(scope="session")
def llm_server_session() -> Iterator[LLMServer]:
    """The local server that replays recorded Anthropic and OpenAI wire traffic."""
    with LLMServer() as server:
        yield server


@pytest.fixture
def server(llm_server_session: LLMServer) -> LLMServer:
    """The replay server, with its script and recorded requests cleared."""
    llm_server_session.reset()
    return llm_server_session


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each phase's report on the test item, for the fixtures' teardown to read."""
    report = yield
    item.stash.setdefault(REPORTS, {})[report.when] = report
    return report


REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.fixture
async def harness(
    client: Client, temporal_address: str, tmp_path: Path, request: pytest.FixtureRequest
) -> AsyncIterator[Harness]:
    h = Harness(client, temporal_address, tmp_path)
    try:
        yield h
    finally:
        call = request.node.stash.get(REPORTS, {}).get("call")
        if call is not None and call.failed:  # say where the test's world stood
            print(await explain(h))
        await h.close()


# temporalio on Python 3.11 can crash at interpreter exit after everything passed
# (sdk-python#300): leave with the session's status before the runtime is torn down.
_status: dict[str, int] = {}


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    _status["code"] = int(exitstatus)


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    if "code" in _status:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(_status["code"])
