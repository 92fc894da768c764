"""From a selection of the store to grouped, merged metrics (what every report shows)."""
