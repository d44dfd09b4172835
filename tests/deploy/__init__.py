"""How the package is installed and deployed: the embedded servers, the wheel and its entry
point, PgBouncer, TLS and rotating credentials, LangGraph's server, the notebooks, clients
an application brings, event loops, and the servers the tests bring for themselves."""
