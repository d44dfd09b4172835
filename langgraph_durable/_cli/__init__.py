"""Pieces of the ``langgraph-durable`` command line: queries, views, actions and the demo."""
