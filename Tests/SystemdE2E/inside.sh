#!/bin/bash
# Runs inside the booted Debian container (systemd as PID 1) after the .deb was installed.
# Writes one PASS or FAIL line per check to /e2e-out/results, details to /e2e-out/log, then
# powers the container off.
set -u
out=/e2e-out/results
log=/e2e-out/log
: > "$out"
: > "$log"
sock=/run/fleet-tokend/tokens.sock
pass() { echo "PASS $1" >> "$out"; }
fail() { echo "FAIL $1${2:+: $2}" >> "$out"; }
check() { local name=$1; shift; if "$@" >> "$log" 2>&1; then pass "$name"; else fail "$name"; fi; }
get() { printf 'GET %s %s\n' "$1" "$2" | socat -t 15 - "UNIX-CONNECT:$sock"; }
stat_field() { printf 'STATS\n' | socat -t 5 - "UNIX-CONNECT:$sock" | tr ' ' '\n' | sed -n "s/^$1=//p"; }

echo "== units" >> "$log"
check "systemd-analyze verify is clean" sh -c \
    'out=$(systemd-analyze verify --man=no fleet-tokend.socket fleet-tokend.service 2>&1); echo "$out"; [ -z "$out" ]'
score=$(systemd-analyze security fleet-tokend.service 2>>"$log" | sed -n 's/.*Overall exposure level for fleet-tokend.service: \([0-9.]*\).*/\1/p')
echo "security score: $score" >> "$log"
if [ -n "$score" ] && awk "BEGIN { exit !($score <= 2.0) }"; then pass "security rating $score <= 2.0"; else fail "security rating" "$score"; fi
check "socket unit listening" systemctl is-active fleet-tokend.socket
check "service not started before the first connection" sh -c '! systemctl is-active --quiet fleet-tokend.service'
check "socket is root:fleet-tokens 0660" sh -c "[ \"\$(stat -c '%a %U:%G' $sock)\" = '660 root:fleet-tokens' ]"

echo "== a fresh install: nothing configured" >> "$log"
# The .deb's config.json serves nothing. The unit runs serve --wait-for-configuration: the first
# connection starts the agent, which stays up answering every token request ERR unavailable naming
# what to configure, so socket activation never starts it again and again and the socket never
# fails; a reload that brings something to serve makes the same process serve.
check "the shipped config.json lists providers and issuers, empty" sh -c \
    '[ "$(tr -d " \n" < /etc/fleet-tokend/config.json)" = "{\"providers\":{},\"issuers\":{}}" ]'
fresh=$(get vehicle v-fresh)
echo "fresh reply: $fresh" >> "$log"
if [[ "$fresh" == "ERR unavailable not configured: /etc/fleet-tokend/config.json serves nothing: add a provider"* ]]; then
    pass "a fresh install answers ERR unavailable naming what to configure"
else
    fail "fresh install" "$fresh"
fi
waiting_pid=$(systemctl show -p MainPID --value fleet-tokend.service)
answered=0
for i in $(seq 1 25); do
    reply=$(get vehicle "v-fresh-$i")
    [[ "$reply" == "ERR unavailable not configured: "* ]] && answered=$((answered + 1))
done
restarts=$(systemctl show -p NRestarts --value fleet-tokend.service)
service_state=$(systemctl show -p ActiveState --value fleet-tokend.service)
socket_state=$(systemctl show -p ActiveState --value fleet-tokend.socket)
socket_sub=$(systemctl show -p SubState --value fleet-tokend.socket)
now_pid=$(systemctl show -p MainPID --value fleet-tokend.service)
echo "after 25 more connections: $answered answered not configured; NRestarts=$restarts service=$service_state socket=$socket_state/$socket_sub MainPID $waiting_pid -> $now_pid" >> "$log"
if [ "$answered" = 25 ]; then pass "25 more connections each get ERR unavailable not configured"; else fail "connections while waiting" "$answered/25 answered"; fi
if [ "$restarts" = 0 ] && [ "$service_state" = active ] && [ "$now_pid" = "$waiting_pid" ] && [ "$now_pid" != 0 ]; then
    pass "no start loop: one process answered all 26 (MainPID $now_pid, service $service_state, NRestarts=$restarts)"
else
    fail "start loop" "NRestarts=$restarts service=$service_state MainPID $waiting_pid -> $now_pid"
fi
if [ "$socket_state" = active ] && ! systemctl is-failed --quiet fleet-tokend.socket; then
    pass "the socket stays active while the agent waits (ActiveState=$socket_state, SubState=$socket_sub)"
else
    fail "socket while waiting" "ActiveState=$socket_state SubState=$socket_sub"
fi
systemctl status fleet-tokend.service --no-pager -n 20 > /tmp/fresh-status.txt 2>&1
cat /tmp/fresh-status.txt >> "$log"
waiting_status=$(sed -n 's/.*Status: "\(.*\)"/\1/p' /tmp/fresh-status.txt)
if [[ "$waiting_status" == "waiting for configuration: /etc/fleet-tokend/config.json serves nothing: add a provider (\"providers\"), an issuer"*"systemctl reload fleet-tokend" ]]; then
    pass "systemctl status says what to configure (Status: \"${waiting_status:0:60}...\")"
else
    fail "systemctl status while waiting" "$waiting_status"
fi
check "the journal says what to configure, once" sh -c \
    '[ "$(journalctl -u fleet-tokend.service --no-pager | grep -c "waiting for configuration: /etc/fleet-tokend/config.json serves nothing")" = 1 ]'
fstatus=$(FLEET_TOKEND_SOCKET=$sock fleet-tokend status 2>&1); fstatus_rc=$?
echo "fleet-tokend status (exit $fstatus_rc): $fstatus" >> "$log"
if [ "$fstatus_rc" = 1 ] && [[ "$fstatus" == "fleet-tokend: waiting for configuration, up "*"! /etc/fleet-tokend/config.json serves nothing: add a provider"* ]]; then
    pass "fleet-tokend status says waiting for configuration and what to configure (exit 1)"
else
    fail "fleet-tokend status while waiting" "exit $fstatus_rc: $fstatus"
fi
fget=$(FLEET_TOKEND_SOCKET=$sock fleet-tokend get vehicle v-fresh 2>&1); fget_rc=$?
if [ "$fget_rc" = 69 ] && [[ "$fget" == *"not configured: /etc/fleet-tokend/config.json serves nothing"* ]]; then
    pass "fleet-tokend get exits 69 (unavailable) naming what to configure"
else
    fail "fleet-tokend get while waiting" "exit $fget_rc: $fget"
fi
fcheck=$(fleet-tokend check-config --config /etc/fleet-tokend/config.json 2>&1); fcheck_rc=$?
if [ "$fcheck_rc" = 78 ] && [[ "$fcheck" == *"nothing to serve: configure an HTTP provider"* ]]; then
    pass "check-config of the shipped config exits 78 naming what to configure"
else
    fail "check-config of the shipped config" "exit $fcheck_rc: $fcheck"
fi
check "systemctl reload with still nothing to serve fails" sh -c '! systemctl reload fleet-tokend.service'
check "the agent keeps waiting after that refused reload" sh -c \
    "[ \"\$(systemctl show -p MainPID --value fleet-tokend.service)\" = '$waiting_pid' ] && systemctl is-active --quiet fleet-tokend.service && systemctl show -p StatusText --value fleet-tokend.service | grep -q '^waiting for configuration: '"
# The operator's edit: the demo issuer, on purpose (the README's minimal example needs a provider).
echo '{"demo": true}' > /etc/fleet-tokend/config.json
check "systemctl reload with something to serve succeeds" systemctl reload fleet-tokend.service
served=$(get vehicle v-fresh)
echo "after the reload: ${served:0:40}..." >> "$log"
if [[ "$served" == OK\ * ]] && [ "$(systemctl show -p MainPID --value fleet-tokend.service)" = "$waiting_pid" ]; then
    pass "after the reload the same process serves tokens"
else
    fail "serving after the reload" "$served"
fi
check "the Status: line reports tokens once serving" sh -c \
    'systemctl show -p StatusText --value fleet-tokend.service | grep -q "tokens held"'
# The checks below start from a socket with no agent behind it: the first GET starts one.
systemctl stop fleet-tokend.service >> "$log" 2>&1
check "the socket still listens with the agent stopped" systemctl is-active fleet-tokend.socket
restarts=$(systemctl show -p NRestarts --value fleet-tokend.service)
if [ "$restarts" = 0 ]; then pass "NRestarts=0 over the whole fresh install"; else fail "NRestarts" "$restarts"; fi

# Per-fetch log lines (with TOKEN_ID and TOKEN_FINGERPRINT) are at debug level. The demo issuer,
# on purpose.
echo '{"log_level": "debug", "demo": true}' > /etc/fleet-tokend/config.json

echo "== activation" >> "$log"
first=$(get vehicle v-e2e)
echo "first reply: ${first:0:40}..." >> "$log"
if [[ "$first" == OK\ * ]]; then pass "GET through the socket unit starts the agent"; else fail "first GET" "$first"; fi
token=$(echo "$first" | cut -d' ' -f2)
check "service active after the first connection" systemctl is-active fleet-tokend.service
demo=$(stat_field demo)
if [ "$demo" = 1 ]; then pass "STATS says the demo issuer runs"; else fail "STATS demo" "$demo"; fi
check "the journal names the demo issuer at start" sh -c 'journalctl -u fleet-tokend.service --no-pager | grep -q "DEMO ISSUER"'
check "fleet-tokend get works" sh -c "[ \"\$(FLEET_TOKEND_SOCKET=$sock fleet-tokend get vehicle v-e2e)\" = '$token' ]"
sleep 6
status=$(systemctl status fleet-tokend.service --no-pager 2>&1 | sed -n 's/.*Status: "\(.*\)"/\1/p')
echo "status line: $status" >> "$log"
if [[ "$status" == *"tokens held"*"hit ratio"*"provider errors"* ]]; then pass "systemctl status shows the STATUS line"; else fail "STATUS line" "$status"; fi

echo "== journal" >> "$log"
journalctl -u fleet-tokend.service -o verbose --no-pager > /tmp/journal.txt 2>&1
check "journal has structured fields" sh -c 'grep -q "TOKEN_KIND=vehicle" /tmp/journal.txt && grep -q "TOKEN_ID=v-e2e" /tmp/journal.txt && grep -q "TOKEN_FINGERPRINT=" /tmp/journal.txt && grep -q "SYSLOG_IDENTIFIER=fleet-tokend" /tmp/journal.txt'
check "no token in the journal" sh -c "! grep -qF '$token' /tmp/journal.txt"

echo "== watchdog" >> "$log"
check "watchdog configured" sh -c '[ "$(systemctl show -p WatchdogUSec --value fleet-tokend.service)" = "30s" ]'
before=$(systemctl show -p WatchdogTimestampMonotonic --value fleet-tokend.service)
sleep 16
after=$(systemctl show -p WatchdogTimestampMonotonic --value fleet-tokend.service)
echo "watchdog timestamps: $before -> $after" >> "$log"
if [ -n "$after" ] && [ "$after" -gt "${before:-0}" ]; then pass "WATCHDOG=1 pings arrive"; else fail "watchdog pings" "$before -> $after"; fi

echo "== reload" >> "$log"
pid=$(systemctl show -p MainPID --value fleet-tokend.service)
check "systemctl reload succeeds" systemctl reload fleet-tokend.service
check "same process after reload" sh -c "[ \"\$(systemctl show -p MainPID --value fleet-tokend.service)\" = '$pid' ]"
reloads=$(stat_field reloads)
if [ "$reloads" = 1 ]; then pass "reload applied before systemctl reload returned"; else fail "reload applied" "reloads=$reloads"; fi
check "reload logged" sh -c 'for i in $(seq 1 50); do journalctl -u fleet-tokend.service --no-pager | grep -q "configuration reloaded" && exit 0; sleep 0.1; done; exit 1'
echo '{"log_level": "debug", "demo": true, "max_entries": "many"}' > /etc/fleet-tokend/config.json
check "a broken config fails systemctl reload" sh -c '! systemctl reload fleet-tokend.service'
check "the agent keeps running after a refused reload" systemctl is-active fleet-tokend.service
echo '{"log_level": "debug", "demo": true}' > /etc/fleet-tokend/config.json
kept=$(get vehicle v-e2e | cut -d' ' -f2)
if [ "$kept" = "$token" ]; then pass "token kept across reload"; else fail "token kept across reload"; fi

echo "== shared memory" >> "$log"
# The .deb's C reader library: the static library, its two headers, and the pkg-config file that
# names the library's folder (fleet-tokend-shm-reader itself is built on the host, from source).
check "the .deb installs libfleet-tokend-reader with its headers and pkg-config file" sh -c \
    'pc=$(ls /usr/lib/*/pkgconfig/fleet-tokend-reader.pc) && libdir=$(sed -n "s/^libdir=//p" "$pc") &&
     [ -f "$libdir/libfleet-tokend-reader.a" ] && [ -f /usr/include/fleet_tokend_reader.h ] &&
     [ -f /usr/include/fleet_tokend_segment.h ]'
seal=$(printf 'SEALCHECK\n' | fleet-tokend-shm-reader "$sock" vehicle 2>>"$log" | tail -n1)
echo "seal check: $seal" >> "$log"
if [ "$seal" = "SEALCHECK pwrite=EPERM ftruncate=EPERM mmap=EPERM" ]; then pass "the hardened unit hands out sealed read-only segments"; else fail "segment seals" "$seal"; fi
# A long-lived reader of the vehicle segment, reading v-e2e every millisecond through the restart below.
( printf 'FOLLOW 15 v-e2e\n'; sleep 17 ) | fleet-tokend-shm-reader "$sock" vehicle > /tmp/shm-follow.txt 2>>"$log" &
follower=$!

echo "== restart under load" >> "$log"
( ok=0; bad=0
  for i in $(seq 1 300); do
      if FLEET_TOKEND_SOCKET=$sock fleet-tokend get vehicle "load-$((i % 7))" > /dev/null 2>>/e2e-out/load-errors; then ok=$((ok+1)); else bad=$((bad+1)); fi
  done
  echo "$ok $bad" > /tmp/load-result ) &
loader=$!
sleep 1
check "systemctl restart succeeds" systemctl restart fleet-tokend.service
wait $loader
read -r ok bad < /tmp/load-result
echo "load: $ok ok, $bad failed" >> "$log"
if [ "$bad" = 0 ] && [ "$ok" = 300 ]; then pass "restart while a client loops loses no request ($ok/300)"; else fail "requests lost across restart" "$ok ok, $bad failed"; fi
newpid=$(systemctl show -p MainPID --value fleet-tokend.service)
if [ "$newpid" != "$pid" ]; then pass "a new process serves after restart"; else fail "restart" "same pid $pid"; fi
after_restart=$(get vehicle v-e2e | cut -d' ' -f2)
if [ "$after_restart" = "$token" ]; then pass "token cached before restart served after it (fd store)"; else fail "fd store handover" "token changed"; fi
misses=$(stat_field misses); fetches=$(stat_field fetches)
echo "after restart: misses=$misses fetches=$fetches" >> "$log"
check "handover logged" sh -c 'journalctl -u fleet-tokend.service --no-pager | grep -q "cache taken over from the previous process"'
wait $follower
follow=$(tail -n1 /tmp/shm-follow.txt)
echo "shared-memory reader: $follow" >> "$log"
if [[ "$follow" == FOLLOW*" lost=0 "*" last=HIT" && "$follow" != *" reconnects=0 "* && "$follow" != *"hits_after_reconnect=0 "* ]]; then
    pass "a shared-memory reader keeps reading across systemctl restart"
else
    fail "shared-memory reader across restart" "$follow"
fi

echo "== peer rules" >> "$log"
# Two workers that may open the socket (group fleet-tokens); only one is allowed vehicle tokens.
useradd --system --no-create-home --shell /usr/sbin/nologin -G fleet-tokens e2e-dispatch >> "$log" 2>&1
useradd --system --no-create-home --shell /usr/sbin/nologin -G fleet-tokens e2e-other >> "$log" 2>&1
echo '{"log_level": "debug", "demo": true, "allow": {"vehicle": {"users": ["e2e-dispatch"]}}}' > /etc/fleet-tokend/config.json
check "reload with peer rules" systemctl reload fleet-tokend.service
as_user() { printf 'GET %s %s\n' "$2" "$3" | runuser -u "$1" -- socat -t 15 - "UNIX-CONNECT:$sock"; }
allowed=$(as_user e2e-dispatch vehicle v-peer)
denied=$(as_user e2e-other vehicle v-peer)
open_kind=$(as_user e2e-other trip t-peer)
echo "allowed: ${allowed:0:20}... denied: $denied trip: ${open_kind:0:20}..." >> "$log"
if [[ "$allowed" == OK\ * ]]; then pass "an allowed user gets a vehicle token through the packaged unit"; else fail "allowed user" "$allowed"; fi
if [[ "$denied" == "ERR denied "* ]]; then pass "another user gets ERR denied"; else fail "other user" "$denied"; fi
if [[ "$open_kind" == OK\ * ]]; then pass "a kind without rules stays open to the socket's group"; else fail "open kind" "$open_kind"; fi
other_uid=$(id -u e2e-other)
check "the denial is logged with the peer's real uid and process" sh -c \
    "journalctl -u fleet-tokend.service -o verbose --no-pager | grep -q 'PEER_UID=$other_uid' && journalctl -u fleet-tokend.service -o verbose --no-pager | grep -q 'PEER_PROCESS=socat'"
# The reload gave vehicle a new segment generation; nobody held the old one, so the kernel freed it
# and told the agent (inotify, allowed by the unit's system-call filter).
mapped=$(stat_field shm_mapped_bytes); current=$(stat_field shm_bytes); retired=$(stat_field shm_retired_mapped)
if [ -n "$mapped" ] && [ "$mapped" = "$current" ] && [ "$retired" = 0 ]; then
    pass "a retired segment nobody holds is counted as freed under the unit's sandbox"
else
    fail "retired segments counted" "mapped=$mapped current=$current retired=$retired"
fi
denied_count=$(stat_field denied)
if [ "$denied_count" = 1 ]; then pass "STATS counts denied=1"; else fail "denied count" "$denied_count"; fi

echo "== key-less issuer" >> "$log"
# Google's metadata server, token endpoint and IAM Credentials faked on loopback (fake-google, a
# transient unit), the host's key file handed to the packaged unit as the systemd credential
# google-application-credentials, and vehicle tokens signed key-less through signJwt.
account=fleet-signer@fake-project.iam.gserviceaccount.com
systemd-run --unit=fake-google --quiet /usr/local/bin/fake-google --port 8089 \
    --write-adc-service-account /etc/fleet-tokend/adc.json --write-public-key /etc/fleet-tokend/fake-google.pem >> "$log" 2>&1
fake_out() { journalctl -u fake-google.service -o cat --no-pager 2>/dev/null; }
for i in $(seq 1 300); do fake_out | grep -q '^listening 8089$' && break; sleep 0.1; done
fake_out >> "$log"
check "fake-google listens in the container" sh -c "journalctl -u fake-google.service -o cat --no-pager | grep -q '^listening 8089\$'"
kid=$(fake_out | sed -n "s/^account $account kid //p" | tail -n1)
cp /etc/fleet-tokend/fake-google.pem /e2e-out/fake-google.pem 2>>"$log"
mkdir -p /etc/systemd/system/fleet-tokend.service.d
printf '[Service]\nLoadCredential=google-application-credentials:/etc/fleet-tokend/adc.json\n' \
    > /etc/systemd/system/fleet-tokend.service.d/keyless-e2e.conf
systemctl daemon-reload
# With issuers set only the kinds under them are served: trip is not.
printf '{"log_level": "debug", "iam_endpoint": "http://127.0.0.1:8089", "issuers": {"vehicle": {"service_account": "%s"}}}\n' \
    "$account" > /etc/fleet-tokend/config.json
check "systemctl restart with a key-less issuer and the credential succeeds" systemctl restart fleet-tokend.service
keyless=$(get vehicle v-keyless)
echo "key-less reply: ${keyless:0:40}..." >> "$log"
if [[ "$keyless" == OK\ * ]]; then pass "a key-less vehicle token is served through IAM signJwt"; else fail "key-less GET" "$keyless"; fi
demo=$(stat_field demo)
if [ "$demo" = 0 ]; then pass "STATS says demo=0 with a key-less issuer"; else fail "STATS demo with an issuer" "$demo"; fi
ktoken=$(echo "$keyless" | cut -d' ' -f2)
printf '%s\n' "$ktoken" > /e2e-out/keyless-token
b64url() { local s=${1//-/+}; s=${s//_//}; while (( ${#s} % 4 )); do s+='='; done; printf '%s' "$s" | base64 -d 2>/dev/null; }
header=$(b64url "$(echo "$ktoken" | cut -d. -f1)")
claims=$(b64url "$(echo "$ktoken" | cut -d. -f2)")
echo "key-less header: $header" >> "$log"
echo "key-less claims: $claims" >> "$log"
if [ -n "$kid" ] && [[ "$header" =~ \"kid\"\ *:\ *\"$kid\" ]] && [[ "$header" =~ \"alg\"\ *:\ *\"RS256\" ]]; then
    pass "the token carries the fake's key id for the signing account"
else
    fail "key-less header" "kid=$kid header=$header"
fi
if [[ "$claims" =~ \"iss\"\ *:\ *\"$account\" && "$claims" =~ \"sub\"\ *:\ *\"$account\" \
    && "$claims" =~ \"authorization\"\ *:\ *\{\ *\"vehicleid\"\ *:\ *\"v-keyless\"\ *\} ]]; then
    pass "the key-less token's claims: iss and sub the signing account, authorization.vehicleid"
else
    fail "key-less claims" "$claims"
fi
other=$(get trip t-keyless)
if [[ "$other" == "ERR bad-kind"* ]]; then pass "with issuers only, an unconfigured kind is ERR bad-kind"; else fail "unconfigured kind" "$other"; fi
journalctl -u fleet-tokend.service -o verbose --no-pager > /tmp/journal-keyless.txt 2>&1
check "the host credentials were found as the systemd credential" grep -q \
    'host-agent@fake-project.iam.gserviceaccount.com .*(systemd credential file /run/credentials/fleet-tokend.service/google-application-credentials)' \
    /tmp/journal-keyless.txt
check "neither the key-less token nor an access token is in the journal" sh -c \
    "! grep -qF '$ktoken' /tmp/journal-keyless.txt && ! journalctl --no-pager -o verbose | grep -q 'ya29\\.fake-'"
check "systemctl reload with a key-less issuer succeeds" systemctl reload fleet-tokend.service
kept=$(get vehicle v-keyless | cut -d' ' -f2)
if [ "$kept" = "$ktoken" ]; then pass "key-less token kept across reload"; else fail "key-less token kept across reload"; fi
fetches=$(stat_field fetches); errors=$(stat_field fetch_errors)
echo "key-less: fetches=$fetches fetch_errors=$errors" >> "$log"
if [ "$fetches" = 1 ] && [ "$errors" = 0 ]; then
    pass "one signJwt fetch, no fetch error (the demo-issuer tokens were not taken over)"
else
    fail "key-less fetches" "fetches=$fetches fetch_errors=$errors"
fi

echo "== GCE metadata endpoint" >> "$log"
# An access token on the metadata endpoint under the hardened unit: the kernel names each peer
# (NETLINK_SOCK_DIAG, so AF_NETLINK in RestrictAddressFamilies=), and only the entry's allow counts.
printf '{"log_level": "debug", "iam_endpoint": "http://127.0.0.1:8089", "issuers": {"vehicle": {"service_account": "%s"}}, "access_tokens": {"fleet-admin": {"service_account": "%s", "allow": {"users": ["e2e-dispatch"]}}}, "metadata_server": {"listen": "127.0.0.1:8989", "default": "fleet-admin"}}\n' \
    "$account" "$account" > /etc/fleet-tokend/config.json
check "systemctl restart with metadata_server succeeds" systemctl restart fleet-tokend.service
# mget USER PATH: the answer to a GET at the endpoint, as USER.
mget() {
    printf 'GET %s HTTP/1.1\r\nHost: 127.0.0.1:8989\r\nMetadata-Flavor: Google\r\nConnection: close\r\n\r\n' "$2" \
        | runuser -u "$1" -- socat -t 15 - TCP:127.0.0.1:8989
}
for _ in $(seq 1 300); do mget root / 2>/dev/null | grep -q '^HTTP/1.1 200' && break; sleep 0.1; done
token_path=/computeMetadata/v1/instance/service-accounts/default/token
mallowed=$(mget e2e-dispatch "$token_path" 2>>"$log")
mother=$(mget e2e-other "$token_path" 2>>"$log")
mroot=$(mget root "$token_path" 2>>"$log")
echo "metadata: allowed ${mallowed:0:12}... other: $(echo "$mother" | tail -n1) root: $(echo "$mroot" | tail -n1)" >> "$log"
if [[ "$mallowed" == "HTTP/1.1 200"* && "$mallowed" == *'"token_type":"Bearer"}'* ]]; then
    pass "the metadata endpoint serves the entry's token to its allowed user under the hardened unit"
else
    fail "metadata endpoint, allowed user" "$(echo "$mallowed" | tail -n1)"
fi
if [[ "$mother" == "HTTP/1.1 403"* && "$mother" == *"uid $(id -u e2e-other) is not allowed the token of fleet-admin"* ]]; then
    pass "the metadata endpoint refuses a user the entry does not allow (403, named by the kernel)"
else
    fail "metadata endpoint, other user" "$(echo "$mother" | tail -n1)"
fi
if [[ "$mroot" == "HTTP/1.1 403"* ]]; then pass "root gets no exemption at the metadata endpoint"; else fail "metadata endpoint, root" "$mroot"; fi
check "no access token in the journal" sh -c "! journalctl --no-pager -o verbose | grep -q 'ya29\\.fake-'"

# Later checks need neither the fake nor the credential: the agent is only stopped.
systemctl stop fake-google.service >> "$log" 2>&1

echo "== stop" >> "$log"
check "systemctl stop succeeds" systemctl stop fleet-tokend.service
check "socket still listening after stop" systemctl is-active fleet-tokend.socket
systemctl status fleet-tokend.service --no-pager >> "$log" 2>&1
journalctl -u fleet-tokend.service -o short-monotonic --no-pager > /e2e-out/journal.txt 2>&1
echo DONE >> "$out"
systemctl poweroff --no-block
