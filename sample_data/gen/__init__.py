"""Helpers of the sample-data generator (model, engines, rollouts, writers)."""
