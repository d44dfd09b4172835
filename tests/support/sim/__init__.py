"""Deterministic simulation of the two-tier protocol: seeded interleavings of sans-I/O
operations, one request at a time, against the real Redis and Postgres, with faults
injected between steps and invariants (DESIGN.md §2) checked after every run."""
