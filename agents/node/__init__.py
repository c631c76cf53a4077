"""``gpuyield node-agent``: carries out yield commands on one node, once each."""
