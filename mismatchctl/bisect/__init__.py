"""The re-scoring harness of ``bisect``: a model loaded from a local checkpoint or a factory,
the settings (one change each from the trainer's), and the logprobs of a sequence's tokens under
a setting. It needs torch (and transformers for a checkpoint directory), imported by its modules
only: importing this package loads neither."""
