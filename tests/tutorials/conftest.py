# The programs here are run by tests/test_tutorials.py in subprocesses (with torch, then with symgrad),
# never imported by pytest's module or doctest collection.
collect_ignore_glob = ["*.py"]
