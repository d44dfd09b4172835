"""I/O drivers: they execute the core's requests and translate driver errors, nothing else.

`sync.py` and `aio.py` are line-by-line mirrors; `tests/test_driver_twins.py` checks that
they differ only in ``async``/``await`` and the client classes they name.
"""
