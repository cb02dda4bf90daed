"""Load: the ingest service with its acknowledgement log, the Locust users, `statebed load run`."""
