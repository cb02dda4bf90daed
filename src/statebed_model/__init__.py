"""What a run is, independent of Spark: workloads (their `apply` and their oracles), input
records, the run directory and Spark-native state decoding.

Both the job (which runs workloads) and the verifiers (which judge them) import this
package; it imports only the store. Dependencies point one way:
store <- model <- verify <- job <- chaos <- load <- report <- cli.
"""
