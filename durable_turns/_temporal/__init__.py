"""The engine's glue to the Temporal SDK, private: which runner runs the engine's workflows
(:mod:`.runner`), the client's bound on updates (:mod:`.interceptors`) and the plugin that
puts them on a team's client, worker and replayer (:mod:`.plugin`).

Only temporalio's public API is used here (``tests/test_public_api.py`` checks every module
of the package); the public name is ``durable_turns.DurableTurnsPlugin``.
"""
