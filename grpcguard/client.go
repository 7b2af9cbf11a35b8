package grpcguard

import (
	"context"
	"crypto/rand"
	"encoding/hex"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// ContextWithKey returns a context whose outgoing calls carry key as their
// idempotency key (in the "idempotency-key" metadata). Use the same key
// for every attempt of one logical call, including the attempts an
// application makes itself after a timeout; a new key is a new call.
func ContextWithKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, defaultKeyMetadata, key)
}

// UnaryClientInterceptor gives every outgoing unary call that has no
// idempotency key a random one (128 bits, hex). The retries gRPC makes by
// itself (a retry policy in the service config, transparent retries)
// resend the call's metadata and so its key; a call the application makes
// again is a new call with a new key, unless it sets one with [ContextWithKey].
func UnaryClientInterceptor() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		if md, ok := metadata.FromOutgoingContext(ctx); !ok || len(md.Get(defaultKeyMetadata)) == 0 {
			var b [16]byte
			rand.Read(b[:])
			ctx = ContextWithKey(ctx, hex.EncodeToString(b[:]))
		}
		return invoker(ctx, method, req, reply, cc, opts...)
	}
}
