"""statebed_job: the PySpark Structured Streaming job around statebed's store, its
workloads, its run directory and the local standalone cluster it runs on."""
