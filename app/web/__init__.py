"""The web side: the server, the page, its socket, the session hub, the views
and plots, /metrics and the Realtime endpoint."""
