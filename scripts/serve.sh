#!/usr/bin/env bash
# `make run`: the daemon on loopback with its embedded store. Prints where it
# listens and where the token is once it answers, then stays in the
# foreground (logs are JSON lines on stderr); Ctrl-C or SIGTERM stops it
# after tearing everything down.
set -euo pipefail
cordon=${1:-build/cordon}
listen=${CORDON_LISTEN:-127.0.0.1:7419}
if [[ -n ${CORDON_STATE_DIR:-} ]]; then
  state=$CORDON_STATE_DIR
elif [[ $(id -u) -eq 0 ]]; then
  state=/var/lib/cordon
else
  state=${XDG_STATE_HOME:-$HOME/.local/state}/cordon
fi
rm -f "$state/serve.json"
"$cordon" serve --state-dir "$state" --listen "$listen" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null || true; wait $daemon' INT TERM
# serve.json appears once the daemon has recovered and answers.
for _ in $(seq 300); do
  [[ -s $state/serve.json ]] && break
  kill -0 $daemon 2>/dev/null || { wait $daemon; exit $?; }
  sleep 0.05
done
url=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["urls"][0])' "$state/serve.json")
token=$(/usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["token_file"])' "$state/serve.json")
cat >&2 <<MSG

cordon serve is listening on $url
  token:  $token  (mode 0600; send it as "Authorization: Bearer <token>")
  store:  $state/cordon.db
  try:    curl -s -H "Authorization: Bearer \$(cat $token)" -d '{"argv": ["/bin/echo", "hi"]}' $url/v1/runs
  client: PYTHONPATH=clients/python /usr/bin/python3 -c 'import cordon_client as c; print(c.Client("$url", token_file="$token").run(shell="uname -a")["stdout"])'
  kernels: a Jupyter Kernel Gateway at $url (/api/kernels; e.g.
          jupyter ... --GatewayClient.url=$url --GatewayClient.auth_token=\$(cat $token))
  API:    docs/api.md; stop with Ctrl-C

MSG
wait $daemon
