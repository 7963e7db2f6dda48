#!/usr/bin/env bash
# Apache Kafka's broker for idem's tests, taken from Maven Central (the
# jars that scripts/kafka/pom.xml names), not from a release tarball:
#
#   scripts/kafka.sh install    # the jars into $IDEM_KAFKA_HOME/libs; quick when they are there
#   scripts/kafka.sh run DIR    # one KRaft node of DIR/server.properties, in the foreground
#   scripts/kafka.sh home       # prints $IDEM_KAFKA_HOME
#
# run formats the node's log directories first if they are new (with the
# cluster id in DIR/cluster.id, written there when missing: give every node
# of a cluster the same one) and then becomes the broker's JVM (exec), so
# that the caller's process is the broker: a SIGKILL of it is a broker
# crash. The broker logs to standard output. KAFKA_HEAP_OPTS sets the heap
# (default -Xms128m -Xmx512m).
#
# scripts/services.sh runs the shared broker of the tests with it; the
# fault suite (integration/faults) runs brokers of its own with it.
set -euo pipefail

KAFKA_VERSION=4.4.0 # as in scripts/kafka/pom.xml
here=$(cd "$(dirname "$0")" && pwd)
home=${IDEM_KAFKA_HOME:-/opt/idem-kafka/$KAFKA_VERSION}

die() { echo "kafka.sh: $*" >&2; exit 1; }

install() {
	if [ -f "$home/installed" ] && [ "$(cat "$home/installed")" = "$KAFKA_VERSION" ]; then
		return 0
	fi
	command -v java >/dev/null || die "java is not installed (Java 17 or later)"
	command -v mvn >/dev/null || die "mvn is not installed (Maven)"
	mkdir -p "$home"
	rm -rf "$home/libs"
	mvn -q -B -Dstyle.color=never -f "$here/kafka/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$home/libs" >&2 ||
		die "mvn could not fetch Apache Kafka $KAFKA_VERSION from Maven Central"
	[ -f "$home/libs/kafka_2.13-$KAFKA_VERSION.jar" ] || die "mvn fetched no kafka_2.13-$KAFKA_VERSION.jar"
	cp "$here/kafka/log4j2.yaml" "$home/log4j2.yaml"
	echo "$KAFKA_VERSION" >"$home/installed"
}

run() {
	local dir=${1:?usage: kafka.sh run DIR}
	[ -f "$dir/server.properties" ] || die "$dir/server.properties is missing"
	[ -f "$home/installed" ] || die "Apache Kafka is not installed in $home: run scripts/kafka.sh install"
	local cp="$home/libs/*"
	if [ ! -s "$dir/cluster.id" ]; then
		java -cp "$cp" kafka.tools.StorageTool random-uuid 2>/dev/null | tail -1 >"$dir/cluster.id"
	fi
	java -cp "$cp" -Dlog4j2.configurationFile="$home/log4j2.yaml" kafka.tools.StorageTool format \
		--ignore-formatted -t "$(cat "$dir/cluster.id")" -c "$dir/server.properties" >/dev/null ||
		die "could not format the log directories of $dir/server.properties"
	# shellcheck disable=SC2086
	exec java ${KAFKA_HEAP_OPTS:--Xms128m -Xmx512m} -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
		-Djava.awt.headless=true -Dlog4j2.configurationFile="$home/log4j2.yaml" \
		-cp "$cp" kafka.Kafka "$dir/server.properties"
}

case ${1:-} in
install) install ;;
run) shift; run "$@" ;;
home) echo "$home" ;;
*) die "usage: kafka.sh install | run DIR | home" ;;
esac
