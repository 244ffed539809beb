# Policy loader and env-boundary fuzzers: the YAML loader on arbitrary
# bytes (errors must be FILE:LINE:COL lines, never crashes), and the
# redactor plus envb_build on an arbitrary parent environment.
tether_fuzz_target(fuzz_policy SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_policy.c LIBS tether_policy)
tether_fuzz_target(fuzz_envb SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_envb.c LIBS tether_envb tether_policy)
# `tether policy suggest`: audit lines (semi-trusted JSONL) to a policy that
# must load back and allow every flow taken.
tether_fuzz_target(fuzz_suggest SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_suggest.c LIBS tether_policy)
