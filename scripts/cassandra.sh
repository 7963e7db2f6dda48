#!/usr/bin/env bash
# Apache Cassandra's node for idem's tests, taken from Maven Central (the
# jars that scripts/cassandra/pom.xml names), not from a release tarball:
#
#   scripts/cassandra.sh install    # the jars into $IDEM_CASSANDRA_HOME/lib; quick when they are there
#   scripts/cassandra.sh run DIR    # one node of DIR/cassandra.yaml, in the foreground
#   scripts/cassandra.sh home       # prints $IDEM_CASSANDRA_HOME
#
# run becomes the node's JVM (exec), so that the caller's process is the
# node: a SIGKILL of it is a node crash. The node logs to standard output.
# CASSANDRA_HEAP_OPTS sets the heap (default -Xms1g -Xmx1g: a node beside
# the other servers of a 2-core machine; Cassandra's own scripts would take
# a quarter of the memory).
#
# scripts/services.sh runs the shared node of the tests with it.
set -euo pipefail

CASSANDRA_VERSION=5.0.6 # as in scripts/cassandra/pom.xml
here=$(cd "$(dirname "$0")" && pwd)
home=${IDEM_CASSANDRA_HOME:-/opt/idem-cassandra/$CASSANDRA_VERSION}

die() { echo "cassandra.sh: $*" >&2; exit 1; }

install() {
	if [ -f "$home/installed" ] && [ "$(cat "$home/installed")" = "$CASSANDRA_VERSION" ]; then
		return 0
	fi
	command -v java >/dev/null || die "java is not installed (Java 17)"
	command -v mvn >/dev/null || die "mvn is not installed (Maven)"
	mkdir -p "$home"
	rm -rf "$home/lib"
	mvn -q -B -Dstyle.color=never -f "$here/cassandra/pom.xml" dependency:copy-dependencies \
		-DincludeScope=runtime -DoutputDirectory="$home/lib" >&2 ||
		die "mvn could not fetch Apache Cassandra $CASSANDRA_VERSION from Maven Central"
	[ -f "$home/lib/cassandra-all-$CASSANDRA_VERSION.jar" ] || die "mvn fetched no cassandra-all-$CASSANDRA_VERSION.jar"
	cp "$here/cassandra/logback.xml" "$home/logback.xml"
	echo "$CASSANDRA_VERSION" >"$home/installed"
}

run() {
	local dir=${1:?usage: cassandra.sh run DIR}
	[ -f "$dir/cassandra.yaml" ] || die "$dir/cassandra.yaml is missing"
	[ -f "$home/installed" ] || die "Apache Cassandra is not installed in $home: run scripts/cassandra.sh install"
	local jamm
	jamm=$(ls "$home"/lib/jamm-*.jar | head -1)
	# The --add-exports and --add-opens are those of Cassandra's own
	# conf/jvm17-server.options: the node reaches into the JDK's internals
	# (off-heap memory, the attach API for jamm's object sizes).
	# shellcheck disable=SC2086
	exec java ${CASSANDRA_HEAP_OPTS:--Xms1g -Xmx1g} -XX:+UseG1GC -XX:MaxGCPauseMillis=300 \
		-XX:+ParallelRefProcEnabled -XX:MaxTenuringThreshold=1 -XX:+ExitOnOutOfMemoryError \
		-XX:HeapDumpPath="$dir" -Xss256k -Djava.awt.headless=true -javaagent:"$jamm" \
		-Djdk.attach.allowAttachSelf=true \
		--add-exports java.base/jdk.internal.misc=ALL-UNNAMED \
		--add-exports java.management.rmi/com.sun.jmx.remote.internal.rmi=ALL-UNNAMED \
		--add-exports java.rmi/sun.rmi.registry=ALL-UNNAMED \
		--add-exports java.rmi/sun.rmi.server=ALL-UNNAMED \
		--add-exports java.sql/java.sql=ALL-UNNAMED \
		--add-exports java.base/java.lang.ref=ALL-UNNAMED \
		--add-exports jdk.unsupported/sun.misc=ALL-UNNAMED \
		--add-exports jdk.compiler/com.sun.tools.javac.file=ALL-UNNAMED \
		--add-exports jdk.attach/sun.tools.attach=ALL-UNNAMED \
		--add-opens java.base/java.lang.module=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.loader=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.ref=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.reflect=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.math=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.module=ALL-UNNAMED \
		--add-opens java.base/jdk.internal.util.jar=ALL-UNNAMED \
		--add-opens jdk.management/com.sun.management.internal=ALL-UNNAMED \
		--add-opens java.base/sun.nio.ch=ALL-UNNAMED \
		--add-opens java.base/java.io=ALL-UNNAMED \
		--add-opens java.base/java.lang.reflect=ALL-UNNAMED \
		--add-opens jdk.compiler/com.sun.tools.javac=ALL-UNNAMED \
		--add-opens java.base/java.lang=ALL-UNNAMED \
		--add-opens java.base/java.util=ALL-UNNAMED \
		-Dio.netty.tryReflectionSetAccessible=true \
		-Dio.netty.allocator.useCacheForAllThreads=true -Dio.netty.allocator.maxOrder=11 \
		-Dcassandra-foreground=yes -Dcassandra.skip_wait_for_gossip_to_settle=0 \
		-Dcassandra.config="file://$dir/cassandra.yaml" -Dcassandra.storagedir="$dir" \
		-Dlogback.configurationFile="$home/logback.xml" \
		-cp "$home/lib/*" org.apache.cassandra.service.CassandraDaemon
}

case ${1:-} in
install) install ;;
run) shift; run "$@" ;;
home) echo "$home" ;;
*) die "usage: cassandra.sh install | run DIR | home" ;;
esac
