"""Loop-IR passes, one per file, run in order by `ember.tir.lower.lower`."""
