"""The ground floor: what every layer uses and no layer owns.

Errors and their exit codes, structured logging, strict JSON, printable names, loopback
addresses and free ports, durations, process identity, and local disk I/O (one atomic
writer). It imports no other statebed package; every package, the store included, imports it.
"""
