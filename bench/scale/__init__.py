"""Scale: per-row cost, memory and reuse as tables and pools grow."""
