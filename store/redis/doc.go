// Package redis is a [store.Store] on Redis or Valkey, through a go-redis
// v9 client (github.com/redis/go-redis/v9): standalone, Sentinel or
// Cluster, with whatever TLS and ACL settings the client was built with.
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	s, err := idemredis.New(client) // import idemredis "github.com/idemguard/idemguard/store/redis"
//	g, err := guard.New(s)
//
// # Layout
//
// Each record is one hash, at the key prefix "idemguard:" (see [WithPrefix])
// followed by the idempotency key, "idemguard:<scope>#<hash>":
//
//	field                   value
//	status                  "INPROGRESS" or "COMPLETED"
//	expiration              the record's expiry, epoch seconds (rounded up)
//	in_progress_expiration  an in-progress lease's end, epoch milliseconds
//	                        (rounded up); absent when the claim holds until
//	                        the expiry
//	data                    the stored result's bytes, as they are (JSON
//	                        results stay readable); gzip-compressed above
//	                        16 KiB when that makes them smaller; absent if
//	                        there is none
//	validation              the payload hash; absent when validation is off
//	token                   the claim's fencing token (idemguard only)
//	result_kind             "error" or "unavailable" for results that are not
//	                        values; absent for a value (idemguard only)
//	data_encoding           "gzip" when data is compressed (idemguard only)
//	format                  the record's format, store.FormatVersion of the
//	                        release that wrote it; a hash without it reads
//	                        as format 1 (idemguard only)
//
// A hash in a newer format than the build reads (written by a newer
// release, during a rolling deploy) is reported with an error matching
// [store.ErrNewerFormat], and nothing else of it is read.
//
// The first five are the field names, meanings and units of AWS Powertools'
// Redis persistence layer (Python and TypeScript). Powertools keeps each
// record as a JSON document in a string key written with SET NX; this store
// keeps a hash, so that its scripts read and change single fields (the
// token, the lease) without decoding and rewriting a whole document, and
// binary and compressed results need no base64. The two cannot share keys
// anyway: Powertools derives keys differently (an MD5 of its own
// serialisation), and its writes are not fenced. docs/redis.md says more.
//
// The key expires on the server (PEXPIREAT) at the record's expiry plus a
// grace ([WithExpiryGrace], default one minute), so that a server clock a
// little ahead of the guards' does not delete a record they still treat as
// live. The server's clock never decides liveness: the scripts compare the
// stored times with the time the guard passes.
//
// # Operations
//
// Every step that must be atomic is one Lua script on one key, run with
// EVALSHA and, when the server lacks the script (after a restart, a
// failover or SCRIPT FLUSH), EVAL:
//
//   - Acquire checks liveness against the given time, and either writes the
//     claim and its expiry or returns the live record, in one round trip.
//   - Complete, Extend and Release change or delete the record only if it is
//     held under the caller's token ([store.ErrTokenMismatch] otherwise).
//   - Get is one HGETALL; GetMany ([store.BatchGetter]) pipelines one
//     HGETALL per key, so a batch of up to 1,000 keys is one round trip.
//   - List and Delete ([store.Admin]) scan the prefix and delete a key.
//
// A guarded call that runs costs two round trips (claim, completion); a
// replay one (the claim script returns the record); a replay from the
// guard's local cache none.
//
// Because every script touches exactly one key, it runs on the node that
// owns the key in a Cluster; no hash tags are needed, and keys spread over
// the slots. The tests run the conformance suite against a three-master
// Cluster.
//
// # Production
//
// The server must run with maxmemory-policy noeviction: under any other
// policy it may evict a record when memory runs out, and an evicted record
// lets a duplicate run its side effect again. [New] checks it when CONFIG
// GET is allowed and logs a warning otherwise. Under noeviction a full
// server refuses writes with OOM, which the store reports as
// [store.ErrThrottled]: calls fail and are retried, nothing runs twice.
//
// Replication is asynchronous: a failover can lose a claim or completion
// that the primary acknowledged. [WithReplicas] waits for replicas (WAIT)
// in the same round trip and reports [ErrNotReplicated] when too few
// acknowledged. docs/redis.md covers persistence, ACLs, and these
// trade-offs.
package redis
