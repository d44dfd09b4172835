"""``python -m langgraph_durable``: the ``langgraph-durable`` command line."""

from langgraph_durable._cli.entry import main

if __name__ == "__main__":
    main()
