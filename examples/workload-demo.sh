#!/bin/sh
# The demo's workload, run by `tether run` as the entrypoint inside the
# sandbox. Both requests go through the proxy (HTTP_PROXY is set by the env
# boundary); the sandbox has no other route out.
url="${1:-http://198.51.100.10:8080/}"
echo "workload: HTTP_PROXY=$HTTP_PROXY"
code=$(curl -sS -o /dev/null -w '%{http_code}' --max-time 10 "$url" 2>&1)
echo "workload: curl $url -> HTTP $code"
if command -v wget >/dev/null 2>&1; then
	if wget -q -O /dev/null -T 10 -t 1 "$url" 2>/dev/null; then
		echo "workload: wget $url -> fetched"
	else
		echo "workload: wget $url -> refused by the proxy"
	fi
else
	python3 -c 'import sys,urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)' "$url" \
		>/dev/null 2>&1 && echo "workload: python3 -> fetched" || echo "workload: python3 -> refused by the proxy"
fi
exit 0
