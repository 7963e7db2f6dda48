#!/usr/bin/env bash
# Makes sure the servers the integration tests use are up on this machine:
# PostgreSQL, Redis, RabbitMQ, NATS with JetStream, and dynalite (a
# DynamoDB-compatible server). A server that is installed but stopped is
# started; one that is missing is installed first, from Debian's packages
# (dynalite: from npm, into $IDEM_DYNALITE_DIR, default /opt/idem-dynalite). Exits non-zero, naming the server, when one
# cannot be reached: `make test` must fail then, not skip.
#
#   scripts/services.sh                 # all of them
#   scripts/services.sh postgres redis  # only these (also: rabbitmq, nats, dynamodb)
set -uo pipefail

PG_URL=${IDEM_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
REDIS_ADDR=${IDEM_REDIS_ADDR:-127.0.0.1:6379}
AMQP_URL=${IDEM_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}
NATS_URL=${IDEM_NATS_URL:-nats://127.0.0.1:4222}
DYNAMODB_URL=${IDEM_DYNAMODB_URL:-http://127.0.0.1:8000}
DYNALITE_DIR=${IDEM_DYNALITE_DIR:-/opt/idem-dynalite}
DYNALITE_VERSION=4.0.0

log() { echo "services: $*" >&2; }

# port_open HOST PORT: true when something accepts TCP connections there.
port_open() { timeout 2 bash -c "exec 3<>/dev/tcp/$1/$2" 2>/dev/null; }

# wait_for NAME HOST PORT [SECONDS]
wait_for() {
	local name=$1 host=$2 port=$3 secs=${4:-60}
	for ((i = 0; i < secs * 4; i++)); do
		port_open "$host" "$port" && return 0
		sleep 0.25
	done
	log "$name is not reachable at $host:$port after ${secs}s"
	return 1
}

apt_updated=
install() {
	if [ -z "$apt_updated" ]; then
		log "apt-get update"
		DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null || return 1
		apt_updated=1
	fi
	log "installing $*"
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

hostport() { # URL or host:port → "host port", with a default port
	local rest=${1#*://}
	rest=${rest#*@}
	rest=${rest%%/*}
	rest=${rest%%\?*}
	local host=${rest%%:*} port=${rest##*:}
	[ "$port" = "$rest" ] && port=$2
	echo "$host" "$port"
}

postgres() {
	read -r host port < <(hostport "$PG_URL" 5432)
	if ! port_open "$host" "$port"; then
		command -v pg_ctlcluster >/dev/null || install postgresql postgresql-client || return 1
		log "starting PostgreSQL"
		pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main start || true
		wait_for PostgreSQL "$host" "$port" || return 1
	fi
	# A fresh install asks for passwords on TCP; the tests connect as the
	# postgres role with trust, as the machines of this project are set up.
	if ! psql "postgres://postgres@$host:$port/postgres?sslmode=disable" -Atqc 'select 1' >/dev/null 2>&1; then
		local hba
		hba=$(ls /etc/postgresql/*/main/pg_hba.conf 2>/dev/null | sort -V | tail -1)
		[ -n "$hba" ] || { log "PostgreSQL refuses the postgres role and no pg_hba.conf was found"; return 1; }
		log "allowing trust on loopback in $hba"
		sed -i '1i host all all 127.0.0.1/32 trust\nhost all all ::1/128 trust' "$hba"
		pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | sort -V | tail -1)" main reload
	fi
	local db=${PG_URL##*/}
	db=${db%%\?*}
	if [ -n "$db" ] && ! psql "postgres://postgres@$host:$port/postgres?sslmode=disable" -Atqc "select 1 from pg_database where datname='$db'" | grep -q 1; then
		log "creating database $db"
		psql "postgres://postgres@$host:$port/postgres?sslmode=disable" -qc "create database \"$db\"" || return 1
	fi
}

redis() {
	read -r host port < <(hostport "$REDIS_ADDR" 6379)
	port_open "$host" "$port" && return 0
	command -v redis-server >/dev/null || install redis-server redis-tools || return 1
	log "starting Redis"
	mkdir -p /var/lib/redis /var/log/redis
	redis-server --daemonize yes --bind 127.0.0.1 -::1 --port "$port" --save "" --appendonly no \
		--dir /var/lib/redis --logfile /var/log/redis/ci.log || return 1
	wait_for Redis "$host" "$port"
}

rabbitmq() {
	read -r host port < <(hostport "$AMQP_URL" 5672)
	port_open "$host" "$port" && return 0
	command -v rabbitmq-server >/dev/null || install rabbitmq-server || return 1
	log "starting RabbitMQ"
	rabbitmq-server -detached || return 1
	wait_for RabbitMQ "$host" "$port" 120
}

nats() {
	read -r host port < <(hostport "$NATS_URL" 4222)
	port_open "$host" "$port" && return 0
	command -v nats-server >/dev/null || install nats-server || return 1
	log "starting NATS"
	mkdir -p /var/lib/nats-server
	start-stop-daemon --start --oknodo --background --exec "$(command -v nats-server)" -- \
		-a 127.0.0.1 -p "$port" -js -sd /var/lib/nats-server -l /var/log/nats-server.log || return 1
	wait_for NATS "$host" "$port"
}

# dynamodb: dynalite, in memory, listening on the loopback address of
# IDEM_DYNAMODB_URL only. Tables become ACTIVE after 50ms rather than
# dynalite's default 500ms: every test creates one.
dynamodb() {
	read -r host port < <(hostport "$DYNAMODB_URL" 8000)
	port_open "$host" "$port" && return 0
	local pkg=$DYNALITE_DIR/node_modules/dynalite
	if [ "$(node -p "require('$pkg/package.json').version" 2>/dev/null)" != "$DYNALITE_VERSION" ]; then
		command -v npm >/dev/null || install nodejs npm || return 1
		log "installing dynalite $DYNALITE_VERSION into $DYNALITE_DIR"
		mkdir -p "$DYNALITE_DIR" || return 1
		npm install --prefix "$DYNALITE_DIR" --no-audit --no-fund --loglevel=error "dynalite@$DYNALITE_VERSION" >/dev/null || return 1
	fi
	log "starting dynalite"
	mkdir -p /var/log
	setsid nohup node "$pkg/cli.js" --host "$host" --port "$port" --createTableMs 50 --deleteTableMs 50 --updateTableMs 50 \
		>>/var/log/idem-dynalite.log 2>&1 </dev/null &
	wait_for dynalite "$host" "$port"
}

services=("$@")
[ ${#services[@]} -gt 0 ] || services=(postgres redis rabbitmq nats dynamodb)
failed=()
for s in "${services[@]}"; do
	case $s in
	postgres | redis | rabbitmq | nats | dynamodb) "$s" || failed+=("$s") ;;
	*) log "unknown service $s"; exit 2 ;;
	esac
done
if [ ${#failed[@]} -gt 0 ]; then
	log "FAILED: ${failed[*]} not reachable; the integration tests cannot run"
	exit 1
fi
log "up: ${services[*]}"
