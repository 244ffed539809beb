#!/usr/bin/env bash
# The net-supervisor's resolver on loopback: see test_dns_resolver.py.
PY3=python3
[ -x /usr/bin/python3 ] && PY3=/usr/bin/python3
exec "$PY3" "$(dirname "$0")/test_dns_resolver.py"
