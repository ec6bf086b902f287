"""What runs inside Ray's task runner actor: our verl trainer subclass and what it calls each step (the data it
trains on, per-task metrics, generation dumps, fault handling, progress events for the launching process)."""
