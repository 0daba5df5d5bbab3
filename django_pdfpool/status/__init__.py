"""The status page's feature: its data and chart (``page``) and the optional Prometheus
endpoint (``metrics``); the history behind the chart is ``admission.history``."""
