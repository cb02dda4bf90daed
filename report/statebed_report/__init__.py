"""Self-contained HTML reports of a run or a matrix (`statebed report`)."""
