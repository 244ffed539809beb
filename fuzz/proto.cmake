# Delegation protocol fuzzers: the frame decoder + message decoder, and the
# certificate/context verifier.
tether_fuzz_target(fuzz_frame SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_frame.c LIBS tether_proto)
tether_fuzz_target(fuzz_verify SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/fuzz_verify.c LIBS tether_proto)
