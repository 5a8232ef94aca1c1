"""pytest plugin of the crash harness (entry point ``pytest11``)."""
