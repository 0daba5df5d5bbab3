"""The status page's feature: its data and chart (``page``), the recent history behind
the chart (``history``), and the optional Prometheus endpoint (``metrics``)."""
