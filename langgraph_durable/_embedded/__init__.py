"""Pieces of `langgraph_durable.embedded`: the process supervisor and one module per server."""
