#!/usr/bin/env bash
# Makes sure the servers the integration tests use are up on this machine,
# from nothing: PostgreSQL, Redis, RabbitMQ, NATS with JetStream, dynalite
# (a DynamoDB-compatible server), Apache Kafka, Apache Cassandra and moto
# (an SQS-compatible server). A server that is up is left alone; one that
# is installed but stopped is started; one that is missing is installed
# first: from Debian's packages, dynalite from npm (into
# $IDEM_DYNALITE_DIR, default /opt/idem-dynalite), Apache Kafka and Apache
# Cassandra from Maven Central (scripts/kafka.sh, scripts/cassandra.sh;
# into $IDEM_KAFKA_HOME, default /opt/idem-kafka/VERSION, and
# $IDEM_CASSANDRA_HOME, default /opt/idem-cassandra/VERSION), moto from
# PyPI (into a virtualenv at $IDEM_MOTO_DIR, default /opt/idem-moto). It
# prints what it did for each and how long
# that took. Exits non-zero, naming the server, when one cannot be reached:
# `make test` must fail then, not skip. Run it as root on Debian 12.
#
#   scripts/services.sh                 # all of them
#   scripts/services.sh postgres redis  # only these (also: rabbitmq, nats, dynamodb, kafka, cassandra, sqs)
set -uo pipefail

PG_URL=${IDEM_POSTGRES_URL:-postgres://postgres@127.0.0.1:5432/test?sslmode=disable}
REDIS_ADDR=${IDEM_REDIS_ADDR:-127.0.0.1:6379}
AMQP_URL=${IDEM_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}
NATS_URL=${IDEM_NATS_URL:-nats://127.0.0.1:4222}
DYNAMODB_URL=${IDEM_DYNAMODB_URL:-http://127.0.0.1:8000}
DYNALITE_DIR=${IDEM_DYNALITE_DIR:-/opt/idem-dynalite}
DYNALITE_VERSION=4.0.0
KAFKA_BROKERS=${IDEM_KAFKA_BROKERS:-127.0.0.1:9092}
KAFKA_DIR=${IDEM_KAFKA_DIR:-/var/lib/idem-kafka}
CASSANDRA_ADDR=${IDEM_CASSANDRA_ADDR:-127.0.0.1:9042}
CASSANDRA_DIR=${IDEM_CASSANDRA_DIR:-/var/lib/idem-cassandra}
SQS_URL=${IDEM_SQS_URL:-http://127.0.0.1:4566}
MOTO_DIR=${IDEM_MOTO_DIR:-/opt/idem-moto}
MOTO_VERSION=5.2.5
here=$(cd "$(dirname "$0")" && pwd)

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
	did="installed, started"
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
		did=${did:-started}
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
	did=${did:-started}
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
	did=${did:-started}
	rabbitmq-server -detached || return 1
	wait_for RabbitMQ "$host" "$port" 120
}

nats() {
	read -r host port < <(hostport "$NATS_URL" 4222)
	port_open "$host" "$port" && return 0
	command -v nats-server >/dev/null || install nats-server || return 1
	log "starting NATS"
	did=${did:-started}
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
		did="installed, started"
		npm install --prefix "$DYNALITE_DIR" --no-audit --no-fund --loglevel=error "dynalite@$DYNALITE_VERSION" >/dev/null || return 1
	fi
	log "starting dynalite"
	did=${did:-started}
	mkdir -p /var/log
	setsid nohup node "$pkg/cli.js" --host "$host" --port "$port" --createTableMs 50 --deleteTableMs 50 --updateTableMs 50 \
		>>/var/log/idem-dynalite.log 2>&1 </dev/null &
	wait_for dynalite "$host" "$port"
}

# kafka: Apache Kafka, one KRaft node in combined mode (broker and
# controller) on the first address of IDEM_KAFKA_BROKERS, its controller on
# the next port, its data in $IDEM_KAFKA_DIR (default /var/lib/idem-kafka),
# its log in /var/log/idem-kafka.log. Sessions as short as a second are
# allowed, as the tests' consumer groups use them. Also kcat, a Kafka
# client on librdkafka.
kafka() {
	read -r host port < <(hostport "${KAFKA_BROKERS%%,*}" 9092)
	# kcat (librdkafka): a Kafka client not written in Go, which the tests
	# produce with beside franz-go.
	if ! command -v kcat >/dev/null; then install kcat || return 1; fi
	port_open "$host" "$port" && return 0
	if ! command -v java >/dev/null; then install openjdk-17-jre-headless || return 1; fi
	if ! command -v mvn >/dev/null; then install maven || return 1; fi
	if [ ! -f "$("$here/kafka.sh" home)/installed" ]; then
		log "installing Apache Kafka from Maven Central into $("$here/kafka.sh" home)"
		did="installed, started"
		"$here/kafka.sh" install 2>/tmp/idem-kafka-install.log || { cat /tmp/idem-kafka-install.log >&2; return 1; }
	fi
	mkdir -p "$KAFKA_DIR/data" || return 1
	cat >"$KAFKA_DIR/server.properties" <<-PROPS
		# Written by scripts/services.sh: the shared broker of idem's tests.
		process.roles=broker,controller
		node.id=1
		controller.quorum.voters=1@$host:$((port + 1))
		listeners=PLAINTEXT://$host:$port,CONTROLLER://$host:$((port + 1))
		advertised.listeners=PLAINTEXT://$host:$port
		controller.listener.names=CONTROLLER
		listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
		inter.broker.listener.name=PLAINTEXT
		log.dirs=$KAFKA_DIR/data
		num.partitions=1
		auto.create.topics.enable=true
		offsets.topic.replication.factor=1
		offsets.topic.num.partitions=10
		transaction.state.log.replication.factor=1
		transaction.state.log.min.isr=1
		share.coordinator.state.topic.replication.factor=1
		share.coordinator.state.topic.min.isr=1
		group.initial.rebalance.delay.ms=0
		group.min.session.timeout.ms=1000
		group.consumer.min.session.timeout.ms=1000
		group.consumer.min.heartbeat.interval.ms=500
		num.network.threads=2
		num.io.threads=4
	PROPS
	log "starting Apache Kafka"
	did=${did:-started}
	setsid nohup "$here/kafka.sh" run "$KAFKA_DIR" >>/var/log/idem-kafka.log 2>&1 </dev/null &
	wait_for Kafka "$host" "$port" 90
}

# cassandra: Apache Cassandra, one node on the address of
# IDEM_CASSANDRA_ADDR (its CQL port; the node talks to itself on the
# storage port 7000 of the same host), its data in $IDEM_CASSANDRA_DIR
# (default /var/lib/idem-cassandra), its log in /var/log/idem-cassandra.log,
# a 1 GiB heap. The commit log is synced periodically (every 10 s,
# Cassandra's default), which the tests' speed wants: a write is
# acknowledged before its commit log is synced, and a restarted node
# replays the log only up to the last sync, so a SIGKILL of the node (not
# only a crash of the machine) loses the writes of up to the last 10 s
# (cassandrastore's TestNodeCrash: 9 to 12 acknowledged outcomes; none
# with commitlog_sync group or batch). Dropped keyspaces and truncated tables are not snapshotted: every
# test run makes and drops a keyspace. Writes and Paxos rounds may take
# longer than Cassandra's defaults (2 s, 1 s) before they time out: on a
# loaded 2-core machine a round can wait that long for the CPU.
cassandra() {
	read -r host port < <(hostport "$CASSANDRA_ADDR" 9042)
	port_open "$host" "$port" && return 0
	if ! command -v java >/dev/null; then install openjdk-17-jre-headless || return 1; fi
	if ! command -v mvn >/dev/null; then install maven || return 1; fi
	if [ ! -f "$("$here/cassandra.sh" home)/installed" ]; then
		log "installing Apache Cassandra from Maven Central into $("$here/cassandra.sh" home)"
		did="installed, started"
		"$here/cassandra.sh" install 2>/tmp/idem-cassandra-install.log || { cat /tmp/idem-cassandra-install.log >&2; return 1; }
	fi
	mkdir -p "$CASSANDRA_DIR" || return 1
	cat >"$CASSANDRA_DIR/cassandra.yaml" <<-YAML
		# Written by scripts/services.sh: the shared node of idem's tests.
		cluster_name: idem-test
		num_tokens: 1
		partitioner: org.apache.cassandra.dht.Murmur3Partitioner
		data_file_directories: [$CASSANDRA_DIR/data]
		commitlog_directory: $CASSANDRA_DIR/commitlog
		saved_caches_directory: $CASSANDRA_DIR/saved_caches
		hints_directory: $CASSANDRA_DIR/hints
		cdc_raw_directory: $CASSANDRA_DIR/cdc_raw
		commitlog_sync: periodic
		commitlog_sync_period: 10000ms
		seed_provider:
		  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
		    parameters:
		      - seeds: "$host:7000"
		listen_address: $host
		rpc_address: $host
		storage_port: 7000
		native_transport_port: $port
		start_native_transport: true
		endpoint_snitch: SimpleSnitch
		auto_snapshot: false
		snapshot_on_duplicate_row_detection: false
		concurrent_reads: 8
		concurrent_writes: 8
		concurrent_counter_writes: 8
		concurrent_materialized_view_writes: 8
		compaction_throughput: 0MiB/s
		write_request_timeout: 5000ms
		read_request_timeout: 10000ms
		cas_contention_timeout: 5000ms
	YAML
	log "starting Apache Cassandra"
	did=${did:-started}
	setsid nohup "$here/cassandra.sh" run "$CASSANDRA_DIR" >>/var/log/idem-cassandra.log 2>&1 </dev/null &
	wait_for Cassandra "$host" "$port" 120
}

# sqs: moto's server, the SQS API (and the rest of moto's AWS services, in
# memory) on the loopback address of IDEM_SQS_URL only, from a virtualenv
# of its own so that no Python package of the system is touched. Its log
# is /var/log/idem-moto.log.
sqs() {
	read -r host port < <(hostport "$SQS_URL" 4566)
	port_open "$host" "$port" && return 0
	if [ "$("$MOTO_DIR/bin/python" -c 'import moto; print(moto.__version__)' 2>/dev/null)" != "$MOTO_VERSION" ]; then
		python3 -m venv --help >/dev/null 2>&1 || install python3-venv || return 1
		log "installing moto[server] $MOTO_VERSION into $MOTO_DIR"
		did="installed, started"
		python3 -m venv "$MOTO_DIR" || return 1
		"$MOTO_DIR/bin/pip" install -q --disable-pip-version-check "moto[server]==$MOTO_VERSION" >/tmp/idem-moto-install.log 2>&1 ||
			{ cat /tmp/idem-moto-install.log >&2; return 1; }
	fi
	log "starting moto"
	did=${did:-started}
	setsid nohup "$MOTO_DIR/bin/moto_server" -H "$host" -p "$port" >>/var/log/idem-moto.log 2>&1 </dev/null &
	wait_for moto "$host" "$port"
}

services=("$@")
[ ${#services[@]} -gt 0 ] || services=(postgres redis rabbitmq nats dynamodb kafka cassandra sqs)
failed=()
for s in "${services[@]}"; do
	case $s in
	postgres | redis | rabbitmq | nats | dynamodb | kafka | cassandra | sqs)
		started=${EPOCHREALTIME/./} did=
		if "$s"; then
			took=$(((${EPOCHREALTIME/./} - started) / 100000))
			log "$(printf '%-8s %-18s %3d.%ds' "$s" "${did:-up already}" $((took / 10)) $((took % 10)))"
		else
			failed+=("$s")
		fi
		;;
	*) log "unknown service $s"; exit 2 ;;
	esac
done
if [ ${#failed[@]} -gt 0 ]; then
	log "FAILED: ${failed[*]} not reachable; the integration tests cannot run"
	exit 1
fi
log "up: ${services[*]}"
