# net-supervisor: the proxy request parser.
tether_fuzz_target(fuzz_http SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_http.c LIBS tether_netsup)
