"""The tests' tools under the tests' own name (``TURNS_TOOLS=tests.support.tools``).

They live in ``testkit/tools.py`` (the benchmarks' workers run them too, and ``bench/``
imports nothing from ``tests/``); this module re-exports them, so a worker loads the very same
tools under either name.
"""

from __future__ import annotations

from testkit.tools import *  # noqa: F403  (a worker loads the tools found here)
from testkit.tools import NoArgs as NoArgs
from testkit.tools import _log as _log
