"""Run a durable-turns worker: ``python worker.py [--tools M] [--hooks M:Class] [--task-queue Q]``.

The same as ``turns worker``; everything it does lives in ``durable_turns.runtime``.
"""

from durable_turns.runtime import main

if __name__ == "__main__":
    main()
