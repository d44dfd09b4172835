"""What the tests share and are not tests: the servers they use (`servers`), checkpoints
put, read and counted (`checkpoints`), tool calls made by hand (`tool_calls`), graphs, real
faults, private Redis servers and clusters, the worker processes crash tests start and
kill, the command line run in-process, and the drivers of the long runs: the simulation
(`sim`), the real-process checker (`checker`) and the real-process chaos (`chaos`, with
its faults in `chaos_nemesis` and its checks in `chaos_checks`)."""
