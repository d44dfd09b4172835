"""Pieces of the ``langgraph-durable`` command line: probes, views and the demo."""
