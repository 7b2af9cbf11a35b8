#!/usr/bin/env bash
# callgrind.sh — the load benchmark's client instructions per operation,
# counted by valgrind's callgrind, which the machine's other work does not
# move: each scenario runs alone, with one caller, at two operation counts;
# instructions per operation are the difference between the two runs'
# totals divided by the operations between them, so that start-up,
# set-up and warm-up cancel out. Garbage collection is left on (GOGC as
# set, the default unless given), so that each scenario pays for its own.
#
#   bench/callgrind.sh [-n LOW,HIGH] [-o DIR] [-b BINARY] SCENARIO... -- [LOAD FLAGS]
#
# Run it where the servers are, for example under the harness:
#
#   IDEMGUARD_SERVICES="redis postgres" scripts/harness.sh run bench/callgrind.sh \
#       -n 400,4400 pg_miss_hand pg_miss_guarded -- -endpoint ''
#
# It prints one line per scenario: its name, instructions per operation,
# and the allocations per operation the higher run reported; then, for each
# scenario with a baseline in the run (bench/load's baselines: guarded
# against hand-written), the ratio. GODEBUG=cpu.rdtscp=off because
# valgrind does not emulate RDTSCP, asyncpreemptoff=1 because callgrind
# cannot follow Go's preemption signals; GOMAXPROCS=1 since valgrind runs
# one thread at a time anyway.
set -euo pipefail

low=400 high=4400 dir="" bin=""
while getopts n:o:b: opt; do
	case $opt in
	n) low=${OPTARG%,*} high=${OPTARG#*,} ;;
	o) dir=$OPTARG ;;
	b) bin=$OPTARG ;;
	*) sed -n '2,24p' "$0" >&2; exit 2 ;;
	esac
done
shift $((OPTIND - 1))
scenarios=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do scenarios+=("$1"); shift; done
[ $# -gt 0 ] && shift # the --
[ ${#scenarios[@]} -gt 0 ] || { echo "callgrind.sh: no scenario" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "callgrind.sh: valgrind is not installed" >&2; exit 2; }

dir=${dir:-$(mktemp -d)}
mkdir -p "$dir"
if [ -z "$bin" ]; then
	bin=$dir/load
	(cd "$(dirname "$0")" && go build -o "$bin" ./load)
fi

# total prints the instructions a callgrind output file counted.
total() { awk '/^(summary|totals):/ { print $2; exit }' "$1"; }

declare -A per allocs
for s in "${scenarios[@]}"; do
	for n in "$low" "$high"; do
		GODEBUG=cpu.rdtscp=off,asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind \
			--callgrind-out-file="$dir/$s.$n.cg" "$bin" -scenarios "$s" -ops "$n" -rounds 1 -warmup 20 \
			-concurrency 1 -replay-keys 16 "$@" >"$dir/$s.$n.json" 2>"$dir/$s.$n.log" ||
			{ echo "callgrind.sh: $s at $n ops failed; see $dir/$s.$n.log" >&2; exit 1; }
	done
	a=$(total "$dir/$s.$low.cg") b=$(total "$dir/$s.$high.cg")
	per[$s]=$(( (b - a) / (high - low) ))
	allocs[$s]=$(sed -n 's/.*"allocs_per_op":\([0-9.]*\).*/\1/p' "$dir/$s.$high.json")
	printf '%-28s %10d instructions/op %8s allocs/op\n' "$s" "${per[$s]}" "${allocs[$s]}"
done

# The baselines, as bench/load compares them.
base() {
	case $1 in
	pg_miss_raw | pg_miss_store | pg_miss_guarded) echo pg_miss_hand ;;
	pg_replay_raw | pg_replay_store | pg_replay_guarded) echo pg_replay_hand ;;
	redis_miss_raw | redis_miss_store | redis_miss_guarded) echo redis_miss_hand ;;
	redis_replay_raw | redis_replay_store | redis_replay_guarded) echo redis_replay_hand ;;
	redis_http_guarded_first) echo redis_http_hand_first ;;
	redis_http_guarded_replay) echo redis_http_hand_replay ;;
	miss_guarded) echo miss_raw ;;
	replay_guarded) echo replay_raw ;;
	pg_tx_guarded) echo pg_tx_raw ;;
	esac
}
# The instruction targets against the hand-written baselines.
target() {
	case $1 in
	pg_miss_guarded | pg_replay_guarded) echo 1.4 ;;
	redis_miss_guarded) echo 1.1 ;;
	redis_replay_guarded) echo 1.2 ;;
	esac
}
for s in "${scenarios[@]}"; do
	b=$(base "$s")
	if [ -n "$b" ] && [ -n "${per[$b]:-}" ]; then
		awk -v s="$s" -v b="$b" -v x="${per[$s]}" -v y="${per[$b]}" -v t="$(target "$s")" \
			'BEGIN { printf "%-28s %.3f× %s (%+d instructions/op)", s, x / y, b, x - y
				if (t != "") printf "  target ≤ %s: %s", t, (x / y <= t ? "ok" : "MISS")
				printf "\n" }'
	fi
done
echo "callgrind.sh: outputs in $dir" >&2
