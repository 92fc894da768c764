"""Statistics of per-step training curves: joins, correlations, lead-lag, spikes and drops."""
