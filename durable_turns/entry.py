"""``durable_turns.run(main())``: a script's entry point that always ends with its own status.

A process that used a Temporal client can crash as the interpreter finalizes, after all its
work is done: temporalio's native runtime keeps threads that may still call into Python while
Python tears itself down ("Fatal Python error: PyGILState_Release: thread state … must be
current when releasing", exit status 134, sometimes a segfault; temporalio/sdk-python#300).
Seen here on Python 3.11, in about one run in 40 of the README's example (more on a busy
machine); closing the client does not prevent it, because the runtime is process-wide.

:func:`run` runs the coroutine, then leaves the way the interpreter would, minus the
teardown the runtime can crash in: it waits for the non-daemon threads, runs the ``atexit``
handlers (``logging`` flushes its handlers there), flushes stdout and stderr, and ends the
process with ``os._exit``. It does the same on every Python version, so a script's exit
status is its own wherever it runs.
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import os
import sys
import threading
import traceback
from collections.abc import Callable, Coroutine
from typing import Any, NoReturn, TypeVar


def run(main: Coroutine[Any, Any, Any]) -> NoReturn:
    """Run ``main`` (as ``asyncio.run`` does) and end the process; never returns.

    The exit status is the one ``sys.exit(asyncio.run(main))`` would give: 0 when ``main``
    returns None, its return value when that is an int; the code of a ``SystemExit`` it
    raises; 1, with the traceback on stderr, for any other exception; 130 on Ctrl-C.
    Make it the last line of a script: nothing after it runs. Shut down a
    ``ThreadPoolExecutor`` of the script's own first (``with`` does, or register it with
    :func:`ends_on_leave`): the interpreter's exit tells every pool's idle threads to end,
    and no public API lets :func:`leave` find them.
    """
    call(lambda: asyncio.run(main))


def call(main: Callable[[], object]) -> NoReturn:
    """Call ``main`` and end the process with its status, as :func:`run` does for a coroutine.

    For a script whose entry point is a plain function (``python worker.py`` calls
    ``runtime.main``); the status follows the same rules as :func:`run`'s.
    """
    try:
        code = exit_status(main())
    except SystemExit as e:
        code = exit_status(e.code)
    except KeyboardInterrupt:
        code = 130
    except BaseException:
        traceback.print_exc()
        code = 1
    leave(code)


def exit_status(value: object) -> int:
    """The status ``sys.exit(value)`` would end the process with: 0 for None, an int as is
    (a bool as 0 or 1), and 1 for anything else, which is printed to stderr first."""
    if value is None:
        return 0
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)  # as sys.exit("message") does
    return 1


_Pool = TypeVar("_Pool", bound=concurrent.futures.Executor)

_POOLS: list[concurrent.futures.Executor] = []
"""The pools :func:`leave` shuts down before it joins the threads (``ends_on_leave``)."""


def ends_on_leave(pool: _Pool) -> _Pool:
    """Have :func:`leave` shut ``pool`` down (its calls finish, its idle threads end) before
    it joins the process's threads, as the interpreter's exit does for every
    ``ThreadPoolExecutor``; returns ``pool``. For the engine's own long-lived pools (the
    plain-``def`` hooks', tools' and extensions'): an idle pool thread otherwise waits for
    work for ever, and ``leave`` with it."""
    _POOLS.append(pool)
    return pool


def lazy_pool(threads: int, name: str) -> Callable[[], concurrent.futures.ThreadPoolExecutor]:
    """A long-lived pool of the process (at most ``threads`` threads named ``name``-N): the
    function returned gives it, made on first use and ended by :func:`leave`
    (:func:`ends_on_leave`)."""
    made: list[concurrent.futures.ThreadPoolExecutor] = []

    def pool() -> concurrent.futures.ThreadPoolExecutor:
        if not made:
            made.append(
                ends_on_leave(
                    concurrent.futures.ThreadPoolExecutor(threads, thread_name_prefix=name)
                )
            )
        return made[0]

    return pool


def leave(code: int) -> NoReturn:
    """End the process with ``code`` in an orderly way, without the interpreter's teardown:
    the pools of :func:`ends_on_leave` shut down, non-daemon threads joined, ``atexit``
    handlers run, stdout and stderr flushed."""
    for pool in _POOLS:
        pool.shutdown(wait=False)
    current = threading.current_thread()
    for thread in threading.enumerate():
        if thread is not current and not thread.daemon:
            thread.join()
    try:
        atexit._run_exitfuncs()
    except BaseException:  # a handler's failure is printed by atexit itself; go on
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed, or a broken pipe
            pass
    os._exit(code)
