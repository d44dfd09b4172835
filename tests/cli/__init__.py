"""The ``langgraph-durable`` command line against the real servers: what it prints, in a
terminal, piped and as JSON, and the operator's actions; passwords never shown."""
