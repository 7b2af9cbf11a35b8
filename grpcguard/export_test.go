package grpcguard

// The response metadata's names, for the tests.
const (
	StatusMetadata  = statusMetadata
	ExpiresMetadata = expiresMetadata
)
