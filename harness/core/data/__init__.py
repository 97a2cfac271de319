"""Task data: the task registry, the sources that read it, and fit sets (unlabeled sentences)."""
