"""``bisect``: which component makes the mismatch, by re-scoring a sample of a run's sequences
with the run's checkpoint under settings that each change one thing of the trainer's
(docs/bisect.md). ``sample.py`` reads the sequences, ``metrics.py`` compares the re-scored
logprobs with both sides, ``build.py`` runs it and says the verdict, ``view.py`` its sections."""
