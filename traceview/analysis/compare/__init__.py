"""Two or more profiles: diff, pooled sides, noise, verify checks, the ladder and the run history."""
