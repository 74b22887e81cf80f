"""The test kit: the stand-ins that both the tests (``tests/``) and the benchmarks
(``bench/``) run against, so that neither imports the other.

* ``llm_server``: a local HTTP server that speaks the Anthropic and OpenAI APIs, replaying
  the recorded wire formats in ``fixtures/llm/`` (sources in its ``SOURCES.md``), paced or not;
* ``cache_sim``: a mode of that server that applies the providers' documented prompt-cache rules;
* ``faultproxy``: a TCP proxy that drops, stalls or cuts a link on demand;
* ``mcp_server``: a small MCP server written with the official ``mcp`` SDK (stdio or HTTP);
* ``load``: busy processes that keep the machine's cores loaded;
* ``fuzz_targets``: the decoders a client or a provider can feed, as fuzzing targets.

A developer's tool, not part of the installed package: the wheel holds ``durable_turns``
only. It is found from the repository root (``python -m bench …``, and pytest's
``pythonpath``), and needs the ``test`` extra (``pip install -e '.[test]'``).
"""
