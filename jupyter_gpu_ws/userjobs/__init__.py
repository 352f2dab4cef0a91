"""Jobs the user starts: scripts and notebooks run by the server, relaunched and retried."""
