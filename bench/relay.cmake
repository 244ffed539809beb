# In-kernel relay (sockmap redirect) vs the user-space relay vs direct:
# the measurement behind "Considered and not built" in docs/performance.md.
add_executable(sockmap_relay ${CMAKE_CURRENT_LIST_DIR}/sockmap_relay.c)
set_target_properties(sockmap_relay PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
