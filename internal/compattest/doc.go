// Package compattest holds the tests that keep stored records readable
// across releases (docs/compatibility.md), on the real servers:
//
//   - the golden records: every kind of record (in progress, completed with
//     a value, a definite error, a result that could not be stored, a large
//     compressed one, a step's, an HTTP response, a gRPC response and error,
//     a transactional completion) in each store's encoding, kept per release
//     under testdata/golden/<version>/, read by the current code through
//     the store and the guard, and compared with what the current code
//     writes (TestGoldenRecords);
//   - the rolling deploy: a build of the previous release, checked out from
//     git at the commit testdata/previous-release names (fetched when a
//     shallow clone lacks it), and the current build run the driver
//     program (driver/) alternately and concurrently on one key space
//     (TestRollingDeploy);
//   - the release candidate's own: its golden set, and the previous
//     release named (TestReleaseSets).
//
// It has no code but its tests and the driver. To add a golden set for a
// release whose encoding changed:
//
//	IDEMGUARD_SERVICES="dynamodb redis postgres" scripts/harness.sh run \
//	    go test ./internal/compattest -run TestGoldenRecords -update v0.2.0
package compattest
