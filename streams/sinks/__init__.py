"""Where decided alerts go: Alertmanager, Grafana, the alerts topic."""
