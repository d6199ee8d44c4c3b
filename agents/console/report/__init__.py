"""``evobus report``: an offline HTML report, with PNG plots, of a campaign's event log."""
