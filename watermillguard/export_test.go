package watermillguard

// The defaults, for the tests.
const (
	DefaultScope = defaultScope
	DefaultTTL   = defaultTTL
	DefaultLease = defaultLease
)
