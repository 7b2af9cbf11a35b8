// Package callopts lets idemguard's own packages ask which settings a list
// of guard call options sets, without package guard exporting its
// configuration. Package guard fills in [Sets] when it is initialised.
package callopts

// Sets reports whether opts, a list of guard.CallOption values, set the
// claim's lease (guard.WithLease) and the concurrency mode (guard.WithWait,
// guard.WithReject). The workflow guard uses it to refuse those options,
// which it sets itself, instead of silently overriding them.
var Sets func(opts []any) (lease, mode bool)
