"""The Kubernetes and Volcano object builders of ``gpuyield.schemas.kube_objects``, for the tests.

One module builds these objects for the tests, the demo and the benchmarks;
this name stays so that the tests' imports read as before.
"""

from gpuyield.schemas.kube_objects import *  # noqa: F403
