"""The tool ledger and durable model calls: replay, leases, crashes mid-call, lost replies."""
