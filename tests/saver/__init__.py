"""The saver against the real Redis and Postgres: LangGraph's conformance suite, drop-in
behaviour, both write modes, reads, retention, integrity, hostile input and setup."""
