"""Pieces of the ``langgraph-durable`` command line: the commands by group (`shell` holds
what they share), queries, views, actions and the demo."""
