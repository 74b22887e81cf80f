"""``python -m bench [--quick] [--no-peers] [--only SECTIONS]``: run, print, write results.

``python -m bench fuzz [...]``: the long fuzz run of the wire's decoders (``bench/fuzz.py``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys
import tempfile
import time
import traceback
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from bench import chunks, crash, floor, history, overhead, peers, throughput
from bench.common import (
    Bench,
    Row,
    code_version,
    loadavg,
    machine_info,
    now_iso,
    render_text,
    temporal_server,
    versions,
    write_results,
)

SECTIONS = {
    "1": "per-step overhead vs the Temporal floor",
    "2": "history per model step vs conversation size",
    "3": "throughput: concurrent 3-step turns, one worker process",
    "4": "crash recovery: kill -9 during a model step",
    "5": "the chunk path",
    "6": "peers, side by side",
}
LIMIT_S = {"1": 180, "2": 120, "3": 720, "4": 240, "5": 180, "6": 1200}
"""A section that takes longer (a wedged turn, say) is stopped and reported as an ERROR."""


@contextlib.asynccontextmanager
async def in_process_workers(b: Bench) -> AsyncIterator[None]:
    """The engine's worker (``worker.running_worker``) and a floor worker, in this process."""
    from durable_turns.config import Settings
    from durable_turns.runtime import running_worker
    from durable_turns.store import open_store

    tag = uuid.uuid4().hex[:6]
    settings = Settings(
        temporal_address=b.address,
        task_queue=f"bench-engine-{tag}",
        store_url=f"sqlite:///{b.tmp / f'engine-{tag}.db'}",
        data_dir=b.tmp / "data",
        demo_dir=b.tmp,  # where bench.common.script() writes
    )
    store = open_store(settings.resolved_store_url)
    b.engine_queue, b.floor_queue, b.store = settings.task_queue, f"bench-floor-{tag}", store
    async with (
        running_worker(b.client, settings, store=store),
        floor.floor_worker(b.client, b.floor_queue, activities=chunks.ACTIVITIES),
    ):
        yield


async def guarded(
    section: str, rows: list[Row], raw: dict[str, Any], run: Callable[[], Awaitable[Any]]
) -> None:
    """Run one measurement; a failure becomes an ERROR row instead of ending the benchmark."""
    print(f"\n[{section}] {SECTIONS[section]} …", flush=True)
    started = time.monotonic()
    try:
        new_rows, new_raw = await asyncio.wait_for(run(), LIMIT_S[section])
    except Exception as e:
        traceback.print_exc()
        why = f"{type(e).__name__}: {e}"
        if isinstance(e, TimeoutError):
            why = f"stopped after {LIMIT_S[section]} s (turns that never finish? see the logs)"
        new_rows = [Row(section, SECTIONS[section], "—", status="ERROR", note=why)]
        new_raw = {"error": why}
    took = time.monotonic() - started
    new_raw = {**new_raw, "seconds": round(took, 1)}
    print(render_text(new_rows), flush=True)
    print(f"({took:.0f} s)", flush=True)
    rows.extend(new_rows)
    raw[section] = new_raw


async def main(args: argparse.Namespace) -> int:
    from durable_turns.config import Settings
    from durable_turns.runtime import connect

    # SIGTERM unwinds like Ctrl-C, so the server and the worker processes are stopped.
    task = asyncio.current_task()
    assert task is not None
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)

    os.environ.pop("TURNS_ENCRYPTION_KEYS", None)  # the default, unencrypted payloads
    os.environ.pop("TURNS_ENCRYPTION_KEYS_FILE", None)
    wanted = set(args.only.split(",")) if args.only else set(SECTIONS)
    if args.no_peers:
        wanted.discard("6")
    started = time.monotonic()
    meta: dict[str, Any] = {
        "mode": "quick" if args.quick else "full",
        "date": now_iso(),
        "command": " ".join(["python -m bench", *sys.argv[1:]]),
        "code": code_version(),
        "machine": machine_info(),
        "python": sys.version.split()[0],
        "versions": versions(),
    }
    rows: list[Row] = []
    raw: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="durable-turns-bench-", dir=args.tmp) as d:
        tmp = Path(d)
        if "5" in wanted:
            await guarded("5", rows, raw, lambda: chunks.run_micro(args.quick))
        async with temporal_server(tmp) as (address, server):
            meta["server"] = {**server, "data_dir": f"{filesystem(tmp)} ({tmp.parent})"}
            client = await connect(Settings(temporal_address=address))
            b = Bench(address, tmp, args.quick, client, server_pid=server["pid"])
            if wanted & {"1", "2", "5"}:
                async with in_process_workers(b):
                    if "1" in wanted:
                        await guarded("1", rows, raw, lambda: overhead.run(b))
                    if "2" in wanted:
                        await guarded("2", rows, raw, lambda: history.run(b))
                    if "5" in wanted:
                        await guarded("5", rows, raw, lambda: chunks.run_worker(b))
            if "3" in wanted:
                await guarded("3", rows, raw, lambda: throughput.run(b))
            if "4" in wanted:
                await guarded("4", rows, raw, lambda: crash.run(b))
            if "6" in wanted:
                async with in_process_workers(b):
                    await guarded("6", rows, raw, lambda: peers.run(b))
    rows.sort(key=lambda r: r.section)
    meta["tables"] = [raw["6"]["table_md"]] if "table_md" in raw.get("6", {}) else []
    meta["seconds"] = time.monotonic() - started
    meta["machine"]["loadavg_end"] = loadavg()
    stem = args.out or ("quick" if args.quick else "latest")
    path = write_results(meta, rows, raw, stem)
    print("\n" + render_text(rows))
    for table in meta["tables"]:
        print("\n" + table)
    print(f"\nwritten: {path} and {path.with_suffix('.json')} ({meta['seconds']:.0f} s)")
    return 1 if any(r.status == "ERROR" for r in rows) else 0


def default_tmp() -> str | None:
    """tmpfs when there is one: disk fsyncs on a shared machine are the noisiest cost."""
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def filesystem(path: Path) -> str:
    """The type of the filesystem holding ``path`` (from /proc/mounts), e.g. tmpfs or ext4."""
    best, kind = "", "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/mounts").read_text().splitlines():
            _, mount, fstype, *_ = line.split()
            if str(path.resolve()).startswith(mount) and len(mount) > len(best):
                best, kind = mount, fstype
    return kind


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    p.add_argument("--quick", action="store_true", help="a smoke run (~1 min), fewer samples")
    p.add_argument("--no-peers", action="store_true", help="skip the peer comparison (6)")
    p.add_argument("--only", help="comma-separated sections to run, e.g. 1,2 (default: all)")
    p.add_argument(
        "--tmp",
        default=default_tmp(),
        help="where the server's data dir and the SQLite stores live (default /dev/shm if there)",
    )
    p.add_argument("--out", help="results file stem under bench/results (default latest/quick)")
    return p.parse_args(argv)


COMMANDS = {"fuzz": "bench.fuzz", "cost": "bench.cost", "capacity": "bench.capacity"}
"""``python -m bench <command> …``: runs of their own, beside the benchmark sections."""


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] in COMMANDS:
        import importlib

        sys.exit(importlib.import_module(COMMANDS[sys.argv[1]]).main(sys.argv[2:]))
    code = asyncio.run(main(parse()))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # temporalio on 3.11 can crash at interpreter exit (DESIGN.md §6)
