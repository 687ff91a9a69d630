"""Exports beyond the summary and the report: the annotated, merged Chrome-trace timeline."""
