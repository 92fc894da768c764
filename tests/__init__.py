"""The test suite, a package so that `tests` here comes before any installed `tests` package
(verl's wheel installs one at the top level of site-packages)."""
