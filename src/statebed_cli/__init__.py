"""The `statebed` command line: one tool, one module per subcommand."""
