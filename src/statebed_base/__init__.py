"""The ground floor: what every layer uses and no layer owns.

Errors and their exit codes (`errors`, `entry`), structured logging, strict JSON, names from
outside printed or made into a path segment safely, loopback addresses and free ports,
durations, processes (what /proc says of one, and the one owner of spawning and stopping
them, pinned by identity), and local disk I/O (one atomic writer). It imports no other
statebed package; every package, the store included, imports it.
"""
