#!/bin/sh
# `switchyard worker` in a container (the worker images' entrypoint). Its
# arguments go to `switchyard worker`; the environment adds:
#
#   SWITCHYARD_WORKER_ID    the worker id (the DaemonSet passes the node name)
#   SWITCHYARD_INVITES      a directory holding invites (a mounted Secret):
#                           <id>.redis-url, <id>.token and <id>.fencing-key,
#                           the three secrets `switchyard workers invite <id>`
#                           prints; this worker reads its own
#   SWITCHYARD_ADVERTISE    --advertise URL (the DaemonSet: http://<pod IP>:9100)
#   SWITCHYARD_WORKER_PORT  --port
#   SWITCHYARD_MODELS       models, separated by spaces (--model each)
#
# Without SWITCHYARD_INVITES, REDIS_URL / SWITCHYARD_WORKER_TOKEN /
# SWITCHYARD_WORKER_FENCING_KEY (or the flags) are used as they are.
set -eu

id="${SWITCHYARD_WORKER_ID:-}"
if [ -n "${SWITCHYARD_INVITES:-}" ]; then
  if [ -z "$id" ]; then
    echo "switchyard-worker: SWITCHYARD_INVITES is set but SWITCHYARD_WORKER_ID is not" >&2
    exit 2
  fi
  for part in redis-url token; do
    if [ ! -s "$SWITCHYARD_INVITES/$id.$part" ]; then
      echo "switchyard-worker: no invite for worker '$id' in $SWITCHYARD_INVITES (missing $id.$part)." >&2
      echo "  Run 'switchyard workers invite $id' and add its secrets to the invites Secret (docs/DEPLOY.md)." >&2
      exit 2
    fi
  done
  REDIS_URL="$(cat "$SWITCHYARD_INVITES/$id.redis-url")"
  SWITCHYARD_WORKER_TOKEN="$(cat "$SWITCHYARD_INVITES/$id.token")"
  export REDIS_URL SWITCHYARD_WORKER_TOKEN
  if [ -s "$SWITCHYARD_INVITES/$id.fencing-key" ]; then
    SWITCHYARD_WORKER_FENCING_KEY="$(cat "$SWITCHYARD_INVITES/$id.fencing-key")"
    export SWITCHYARD_WORKER_FENCING_KEY
  fi
fi

set -- worker "$@"
if [ -n "$id" ]; then set -- "$@" --id "$id"; fi
if [ -n "${SWITCHYARD_ADVERTISE:-}" ]; then set -- "$@" --advertise "$SWITCHYARD_ADVERTISE"; fi
if [ -n "${SWITCHYARD_WORKER_PORT:-}" ]; then set -- "$@" --port "$SWITCHYARD_WORKER_PORT"; fi
for model in ${SWITCHYARD_MODELS:-}; do set -- "$@" --model "$model"; done
# SWITCHYARD_CLI: another CLI entry point (the tests use it).
exec node "${SWITCHYARD_CLI:-/app/apps/cli/bin/switchyard.mjs}" "$@"
