"""statebed_chaos: verifiers now; fault controllers, experiments and reports next."""
