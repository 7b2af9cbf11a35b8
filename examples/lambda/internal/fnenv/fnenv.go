// Package fnenv builds what the example functions share from their
// environment: a DynamoDB client, the guard over the idempotency table,
// and the shipments table their side effect writes to.
package fnenv

import (
	"context"
	"os"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idemguard/idemguard/guard"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// Environment variables the functions read.
const (
	IdempotencyTableEnv = "IDEMPOTENCY_TABLE" // the guard's table
	ShipmentsTableEnv   = "SHIPMENTS_TABLE"   // where the side effect is recorded
	// EndpointEnv, when set, points the DynamoDB client at another
	// endpoint, such as DynamoDB Local (the tests set it).
	EndpointEnv = "IDEMGUARD_DYNAMODB_ENDPOINT"
)

// Env is what a function needs, built once at cold start.
type Env struct {
	DB        *dynamodb.Client
	Guard     *guard.Guard
	Shipments string
}

// New builds the client and the guard, or panics: at cold start, a
// function that cannot reach its table should fail its init.
func New(opts ...guard.Option) *Env {
	ctx := context.Background()
	cfg, err := awsconfig.LoadDefaultConfig(ctx)
	if err != nil {
		panic(err)
	}
	db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		if ep := os.Getenv(EndpointEnv); ep != "" {
			o.BaseEndpoint = aws.String(ep)
			o.DisableValidateResponseChecksum = true // DynamoDB Local
		}
	})
	s, err := idemddb.New(db, os.Getenv(IdempotencyTableEnv))
	if err != nil {
		panic(err)
	}
	g, err := guard.New(s, opts...)
	if err != nil {
		panic(err)
	}
	return &Env{DB: db, Guard: g, Shipments: os.Getenv(ShipmentsTableEnv)}
}

// Ship is the functions' side effect: it records one more shipment of
// order in the shipments table, so that a shipment made twice shows.
func (e *Env) Ship(ctx context.Context, order string) error {
	_, err := e.DB.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 aws.String(e.Shipments),
		Key:                       map[string]types.AttributeValue{"order_id": &types.AttributeValueMemberS{Value: order}},
		UpdateExpression:          aws.String("ADD shipments :one"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: strconv.Itoa(1)}},
	})
	return err
}
