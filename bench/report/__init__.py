"""Reports: the deploy report written as JSON, Markdown and PNG plots (``writers``)."""
