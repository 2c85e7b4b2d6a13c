#!/bin/sh
# An operator's first setup, end to end: add a server, see what it still needs, check it,
# import its catalogue, switch its tools on, read the result.
#
#   examples/operator_setup.sh <server url> [database]
#
# From the source tree after `make`; installed, call `mcpclient` instead of bin/mcpclient.
set -eu
url=${1:?usage: examples/operator_setup.sh <server url> [database]}
db=${2:-${TMPDIR:-/tmp}/mcpclient-example.db}
mc() { "$(dirname "$0")/../bin/mcpclient" --db "$db" "$@"; }

mc add --identifier demo --name "Demo server" --url "$url"          # says what is missing
mc edit demo --data-class publicContent --approval no --enabled     # what add asked for
mc test demo                                                        # reachable? latency?
mc check demo || echo "(some conformance check failed: see above)"  # does it work with this client?
mc import demo                                                      # tools start switched off
mc enable mcp_demo                                                  # the group and all its tools on
mc tools demo
mc --json servers
