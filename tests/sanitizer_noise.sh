# Sourced by the script harnesses (tests/proc-supervisor/lib.sh,
# tests/e2e/lib.sh). A sanitizer build's runtime warns on stderr when a
# vfork child switches stacks (three lines, harmless): drop them where a
# test reads stderr.
no_sanitizer_noise() {
	grep -v -e '^==[0-9]*==WARNING: ASan is ignoring requested __asan_handle_no_return' \
		-e '^False positive error reports may follow$' \
		-e '^For details see https://github.com/google/sanitizers/issues/189$'
}
