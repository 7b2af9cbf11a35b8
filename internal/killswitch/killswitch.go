// Package killswitch lets the project's own suites build a disabled guard,
// as IDEMGUARD_DISABLED makes one, without setting the process environment,
// which every test running at the same time reads. It is for tests; users
// disable guards with the environment variable alone.
package killswitch

// Disable is an option of guard.New (a guard.Option) that makes the guard
// a pass-through, exactly as IDEMGUARD_DISABLED set when New runs does.
// Package guard sets it when it is initialised; it is typed any so that
// this package need not import guard:
//
//	g, err := guard.New(s, killswitch.Disable.(guard.Option))
var Disable any
