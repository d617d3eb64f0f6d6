#!/usr/bin/env bash
# Smoke test of the binaries from build_components.sh: starts etcd and
# kube-apiserver on 127.0.0.1 (free ports, temporary data dir, self-signed
# certificates made with openssl), waits for /readyz, checks that an admin can
# list namespaces with a bearer token and with a client certificate, installs
# Kueue's CRDs, runs `kueue --help`, and stops everything. It is also the
# reference for the flags that work; see NOTES.md.
#
# Usage: tests/e2e/smoke_control_plane.sh    (KEEP=1 keeps the work directory)
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${TPU_FALLBACK_E2E_CACHE:-$HOME/.cache/tpu-fallback-e2e}

"$HERE/build_components.sh" >/dev/null
# shellcheck disable=SC1091
source "$CACHE/bin.env"

log() { printf '[smoke] %s\n' "$*" >&2; }

WORK=$(mktemp -d "${TMPDIR:-/tmp}/tpu-fallback-e2e.XXXXXX")
PIDS=()
# stop_pid PID: SIGTERM, then SIGKILL if it has not exited within 20 s.
stop_pid() {
  local pid=$1 i
  kill "$pid" 2>/dev/null || return 0
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
}
cleanup() {
  local rc=$? i
  # Reverse start order: kube-apiserver before etcd, or its graceful shutdown
  # hangs on etcd requests that can no longer succeed.
  for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
    stop_pid "${PIDS[i]}"
  done
  if [[ $rc -ne 0 ]]; then
    for f in "$WORK"/*.log; do
      [[ -f "$f" ]] || continue
      log "---- last lines of $f"
      tail -n 30 "$f" >&2 || true
    done
  fi
  if [[ "${KEEP:-0}" == 1 ]]; then log "kept $WORK"; else rm -rf "$WORK"; fi
  exit "$rc"
}
trap cleanup EXIT

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# --- certificates ---------------------------------------------------------
PKI="$WORK/pki"
mkdir -p "$PKI"
(
  cd "$PKI"
  openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=tpu-fallback-e2e-ca" \
    -keyout ca.key -out ca.crt \
    -addext "basicConstraints=critical,CA:TRUE" \
    -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  # Serving certificate of the API server.
  openssl req -newkey rsa:2048 -nodes -subj "/CN=kube-apiserver" \
    -keyout apiserver.key -out apiserver.csr 2>/dev/null
  printf '%s\n' \
    "subjectAltName=IP:127.0.0.1,DNS:localhost,IP:10.0.0.1,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc" \
    "extendedKeyUsage=serverAuth" "keyUsage=critical,digitalSignature,keyEncipherment" > apiserver.ext
  openssl x509 -req -in apiserver.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days 2 -extfile apiserver.ext -out apiserver.crt 2>/dev/null
  # Admin client certificate: O=system:masters is bound to cluster-admin.
  openssl req -newkey rsa:2048 -nodes -subj "/O=system:masters/CN=e2e-admin" \
    -keyout admin.key -out admin.csr 2>/dev/null
  printf '%s\n' "extendedKeyUsage=clientAuth" "keyUsage=critical,digitalSignature,keyEncipherment" > admin.ext
  openssl x509 -req -in admin.csr -CA ca.crt -CAkey ca.key -CAcreateserial \
    -days 2 -extfile admin.ext -out admin.crt 2>/dev/null
  # Service-account token signing key pair.
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
)
TOKEN=$(python3 -c 'import secrets; print(secrets.token_hex(16))')
# token,user,uid,"group,..."
printf '%s,e2e-admin,e2e-admin,"system:masters"\n' "$TOKEN" > "$PKI/tokens.csv"

# --- etcd -------------------------------------------------------------------
ETCD_CLIENT_PORT=$(free_port)
ETCD_PEER_PORT=$(free_port)
ETCD_URL="http://127.0.0.1:$ETCD_CLIENT_PORT"
"$ETCD" \
  --name e2e \
  --data-dir "$WORK/etcd-data" \
  --listen-client-urls "$ETCD_URL" \
  --advertise-client-urls "$ETCD_URL" \
  --listen-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-advertise-peer-urls "http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster "e2e=http://127.0.0.1:$ETCD_PEER_PORT" \
  --initial-cluster-state new \
  --unsafe-no-fsync \
  --log-level warn \
  > "$WORK/etcd.log" 2>&1 &
PIDS+=($!)
start=$SECONDS
until curl -fsS "$ETCD_URL/health" 2>/dev/null | grep -q '"health":"true"'; do
  kill -0 "${PIDS[0]}" 2>/dev/null || { log "etcd exited"; exit 1; }
  (( SECONDS - start < 30 )) || { log "etcd not healthy after 30s"; exit 1; }
  sleep 0.2
done
log "etcd healthy on $ETCD_URL after $((SECONDS - start))s"

# --- kube-apiserver -----------------------------------------------------------
API_PORT=$(free_port)
API_URL="https://127.0.0.1:$API_PORT"
"$KUBE_APISERVER" \
  --etcd-servers "$ETCD_URL" \
  --bind-address 127.0.0.1 \
  --advertise-address 127.0.0.1 \
  --endpoint-reconciler-type none \
  --secure-port "$API_PORT" \
  --cert-dir "$WORK/apiserver-certs" \
  --tls-cert-file "$PKI/apiserver.crt" \
  --tls-private-key-file "$PKI/apiserver.key" \
  --client-ca-file "$PKI/ca.crt" \
  --token-auth-file "$PKI/tokens.csv" \
  --authorization-mode RBAC \
  --service-cluster-ip-range 10.0.0.0/24 \
  --service-account-issuer https://kubernetes.default.svc.cluster.local \
  --service-account-signing-key-file "$PKI/sa.key" \
  --service-account-key-file "$PKI/sa.pub" \
  > "$WORK/apiserver.log" 2>&1 &
PIDS+=($!)
start=$SECONDS
until curl -fsS --cacert "$PKI/ca.crt" -H "Authorization: Bearer $TOKEN" "$API_URL/readyz" >/dev/null 2>&1; do
  kill -0 "${PIDS[1]}" 2>/dev/null || { log "kube-apiserver exited"; exit 1; }
  (( SECONDS - start < 120 )) || { log "kube-apiserver not ready after 120s"; exit 1; }
  sleep 0.5
done
log "kube-apiserver ready on $API_URL after $((SECONDS - start))s"

curl -fsS --cacert "$PKI/ca.crt" -H "Authorization: Bearer $TOKEN" "$API_URL/readyz?verbose" | tail -n 1 >&2
version=$(curl -fsS --cacert "$PKI/ca.crt" -H "Authorization: Bearer $TOKEN" "$API_URL/version" \
  | python3 -c 'import json,sys; print(json.load(sys.stdin)["gitVersion"])')
log "/version gitVersion: $version"
# The client certificate works as well (what a kubeconfig would use).
curl -fsS --cacert "$PKI/ca.crt" --cert "$PKI/admin.crt" --key "$PKI/admin.key" \
  "$API_URL/api/v1/namespaces" \
  | python3 -c 'import json,sys; print("[smoke] namespaces:", " ".join(i["metadata"]["name"] for i in json.load(sys.stdin)["items"]))' >&2
# Anonymous requests to resources are refused by RBAC.
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$PKI/ca.crt" "$API_URL/api/v1/namespaces")
[[ "$code" == 403 ]] || { log "anonymous list of namespaces gave HTTP $code, wanted 403"; exit 1; }

# Kueue's CRDs install and become Established.
ncrd=0
for crd in "$KUEUE_CRD_DIR"/*.yaml; do
  ncrd=$((ncrd + 1))
  code=$(curl -sS -o "$WORK/crd-create.out" -w '%{http_code}' --cacert "$PKI/ca.crt" \
    -H "Authorization: Bearer $TOKEN" -H 'Content-Type: application/yaml' --data-binary @"$crd" \
    "$API_URL/apis/apiextensions.k8s.io/v1/customresourcedefinitions")
  [[ "$code" == 201 ]] || { log "creating $(basename "$crd") gave HTTP $code:"; cat "$WORK/crd-create.out" >&2; exit 1; }
done
start=$SECONDS
until curl -fsS --cacert "$PKI/ca.crt" -H "Authorization: Bearer $TOKEN" "$API_URL/apis/kueue.x-k8s.io" 2>/dev/null \
    | grep -q '"groupVersion"'; do
  (( SECONDS - start < 60 )) || { log "kueue.x-k8s.io API group not served after 60s"; exit 1; }
  sleep 0.5
done
log "installed $ncrd Kueue CRDs; kueue.x-k8s.io served after $((SECONDS - start))s"

"$KUEUE" --help > "$WORK/kueue-help.log" 2>&1 || { log "kueue --help failed"; exit 1; }
log "kueue --help: ok ($(wc -l < "$WORK/kueue-help.log") lines)"
start=$SECONDS
stop_pid "${PIDS[1]}"
log "kube-apiserver stopped in $((SECONDS - start))s"
echo "smoke: etcd + kube-apiserver $version started and answered; kueue runs"
