# net-supervisor: the workload resolver's DNS messages.
tether_fuzz_target(fuzz_dns SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_dns.c LIBS tether_netsup)
