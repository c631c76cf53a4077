"""Tests of the Kubernetes source and of the fake API server it is tested against."""
