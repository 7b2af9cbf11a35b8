package activity

// Test-only access to the key header, which workflows set through
// workflow.ContextWithKey and the interceptor.
const KeyHeader = keyHeader

var (
	EncodeKeyHeader = encodeKeyHeader
	ExplicitKey     = explicitKey
)
