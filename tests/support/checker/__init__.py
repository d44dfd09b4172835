"""A real-process checker in the spirit of Jepsen (issue 24).

    python -m tests.support.checker --seconds 60 --seed 1 --mode both [--scenario general]

Worker processes (`tests.support.checker.worker`), each its own `DurableSaver` on a private Redis
and the shared Postgres, each reaching them through proxies of its own, call the saver
directly on a few shared threads and record every call with its invocation and completion
times and outcome. A nemesis (`tests.support.checker.run`) cuts or slows one process's link,
cuts its Postgres, pauses or kills it, restarts Redis in a persistence mode, evicts keys.
Then every fault heals, a fresh saver reads every thread, and the history checker
(`tests.support.checker.check`) looks for stale reads beyond the failure model's bounded window,
lost acknowledged checkpoints, missing pending writes, deleted threads coming back, and
forks; it prints the history slice around each violation.
"""
