"""``gpuyield worker``: the Faust app whose agents run the controller's core on the topics."""
