package grpcguard_test

import (
	"context"
	"fmt"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/idemguard/idemguard/grpcguard"
	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store/memory"
)

// A server whose unary calls are guarded, and a client that sends one call
// twice with the same key: the second is a replay of the first response,
// unmarshalled into the handler's response type.
func ExampleUnaryServerInterceptor() {
	g, _ := guard.New(memory.New())
	srv := grpc.NewServer(grpc.UnaryInterceptor(grpcguard.MustUnaryServerInterceptor(g,
		grpcguard.WithMethods(healthpb.Health_Check_FullMethodName))))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	lis, _ := net.Listen("tcp", "127.0.0.1:0")
	go srv.Serve(lis)
	defer srv.Stop()

	conn, _ := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)
	ctx := grpcguard.ContextWithKey(context.Background(), "8e03978e-40d5-43e8-bc93-6894a57f9324")
	for range 2 {
		var header metadata.MD
		resp, err := client.Check(ctx, &healthpb.HealthCheckRequest{}, grpc.Header(&header))
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println(resp.GetStatus(), header.Get("idempotency-key-status"))
	}
	// Output:
	// SERVING [executed]
	// SERVING [replayed]
}
