package chaos

import "github.com/idemguard/idemguard/internal/testing/faultproxy"

// The store's fault proxy is the repository's internal/testing/faultproxy, shared
// with the stores' linearizability tests: [faultproxy.DynamoDB] in front of
// DynamoDB, [faultproxy.Redis] in front of Redis.
type (
	// Fault is a kind of fault the proxy injects into a request.
	Fault = faultproxy.Fault
	// FaultConfig says which faults the proxy injects and how often.
	FaultConfig = faultproxy.Config
	// FaultCounts is the number of faults injected, by kind.
	FaultCounts = faultproxy.Counts
)

// checkLoopback fails unless hostport names a loopback address.
func checkLoopback(hostport string) error { return faultproxy.CheckLoopback(hostport) }
