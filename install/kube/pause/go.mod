module statebed.local/pause

go 1.25.0
