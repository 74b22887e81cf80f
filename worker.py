"""Run a durable-turns worker: ``python worker.py [--tools M] [--hooks M:Class] [--task-queue Q]``.

The same as ``turns worker``; everything it does lives in ``durable_turns.runtime``. It ends
through ``durable_turns.entry`` as ``turns worker`` does, without the interpreter's teardown,
which temporalio's native runtime can abort (exit status 134, temporalio/sdk-python#300).
"""

from durable_turns import entry, runtime

if __name__ == "__main__":
    entry.call(runtime.main)
