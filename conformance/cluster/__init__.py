"""The cluster profile as a running system: the chaos scenario (issue 17 item 5)."""
