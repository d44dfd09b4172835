"""Real faults: processes SIGKILLed and restarted, Redis killed, Postgres cut, tiers out of
reach, calls cancelled, a fork, a Sentinel failover, a Redis Cluster losing a primary; the
simulation, the real-process checker and the chaos run, short."""
