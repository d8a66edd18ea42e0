"""Settings for the whole suite."""

from hypothesis import settings

# Hypothesis's per-example deadline is a timing assert: on a shared 2-core machine one
# slow example says nothing about the code (a CI run at load 10 failed test_split's
# determinism property on 285 ms against 200). Speed is measured in bench/, not here.
settings.register_profile("suite", deadline=None)
settings.load_profile("suite")
