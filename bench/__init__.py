"""Benchmarks: the cost of durability, against the Temporal floor and peer integrations.

    python -m bench              everything (~5 min on 2 cores); bench/results/latest.{md,json}
    python -m bench --quick      a smoke run (~1 min); bench/results/quick.{md,json}
    python -m bench --no-peers   without the pydantic-ai / OpenAI Agents comparison
    python -m bench fuzz         the wire's decoders fuzzed long; bench/results/fuzz.md

One module per measurement: ``chunks`` (5), ``overhead`` (1), ``history`` (2),
``throughput`` (3), ``crash`` (4), ``peers`` (6, driving ``peers_run`` in its own venv);
``floor`` holds the bare Temporal workflows every ratio is measured against, ``common``
the statistics, the table and the processes.
"""
