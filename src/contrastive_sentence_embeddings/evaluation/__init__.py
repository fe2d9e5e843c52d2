"""The evaluator library: STS test sets and their scoring (more to come: transfer
tasks, alignment and uniformity)."""
