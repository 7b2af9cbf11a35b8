// Package guardtest holds the guard's contract suites, which any store can
// run against its real server: the request floor ([RunRequestFloor]: how
// many round trips each kind of call costs), the composition suite
// ([RunComposition]: a guarded step inside every entry point, through
// replays, errors, reused keys, live holders and takeovers, with each side
// effect happening once; and with the guard disabled, a pass-through),
// and, for a store with transactions, the outcomes of adapt.ExecuteTx
// ([RunTxOutcomes]: the outcome and error every path reports, a refusal
// by the function's own condition among them).
//
// The store's own semantics (atomic claims, fencing, expiry) are package
// storetest's; this package holds what the guard promises on top of them.
package guardtest
