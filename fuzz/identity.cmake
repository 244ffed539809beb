# procfs parsers: /proc/<pid>/stat, status, cgroup, maps and fdinfo contents
# are attacker-influenced (comm, paths); every parser on arbitrary bytes.
tether_fuzz_target(fuzz_procfs SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_procfs.c LIBS tether_identity)
# the identity feed's line reader: its compact-shape reader against jansson's
tether_fuzz_target(fuzz_idfeed SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_idfeed.c LIBS tether_identity)
