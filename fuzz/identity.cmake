# procfs parsers: /proc/<pid>/stat, status, cgroup, maps and fdinfo contents
# are attacker-influenced (comm, paths); every parser on arbitrary bytes.
tether_fuzz_target(fuzz_procfs SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_procfs.c LIBS tether_identity)
