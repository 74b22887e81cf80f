"""Everything that does I/O: model steps, tool calls, the transcript store, the providers."""
