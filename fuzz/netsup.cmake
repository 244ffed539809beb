# net-supervisor: the proxy request parser.
tether_fuzz_target(fuzz_http SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_http.c LIBS tether_netsup)
# net-supervisor: the transparent flow's peek (TLS SNI, HTTP Host).
tether_fuzz_target(fuzz_flowpeek SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_flowpeek.c LIBS tether_netsup)
