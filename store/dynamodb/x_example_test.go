package dynamodb_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/store"
	idemddb "github.com/idemguard/idemguard/store/dynamodb"
)

// A guard over the DynamoDB store: the charge runs once per order, however
// often the caller retries.
func ExampleNew() {
	ctx := context.Background()
	// In production, build the client from the default AWS configuration:
	//
	//	cfg, err := config.LoadDefaultConfig(ctx)
	//	client := dynamodb.NewFromConfig(cfg)
	client := dynamodb.New(dynamodb.Options{Region: "eu-west-1"})

	s, err := idemddb.New(client, "idempotency")
	if err != nil {
		log.Fatal(err)
	}
	g, err := guard.New(s)
	if err != nil {
		log.Fatal(err)
	}

	order := map[string]any{"order_id": "o-1001", "amount": 4200}
	chargeID, err := guard.Do(ctx, g, "charge", order, func(ctx context.Context) (string, error) {
		return "ch_1", nil // call the payment provider here
	})
	switch {
	case errors.Is(err, store.ErrThrottled):
		// DynamoDB kept throttling after the store's retries; the charge
		// did not run. Back off and try again.
	case err != nil:
		log.Fatal(err)
	}
	fmt.Println(chargeID)
}

// Sort-key mode, for a table whose primary key is id (partition) + sk
// (sort), as AWS Powertools' sortKeyAttr and staticPkValue options make it.
func ExampleWithSortKey() {
	client := dynamodb.New(dynamodb.Options{Region: "eu-west-1"})
	s, err := idemddb.New(client, "shared-table",
		idemddb.WithSortKey("sk", "idempotency#billing-service"))
	if err != nil {
		log.Fatal(err)
	}
	_ = s
}

// Creating the table against DynamoDB Local, for development. Pass
// CreateTable the same options as New.
func ExampleCreateTable() {
	ctx := context.Background()
	client := dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String("http://127.0.0.1:8000"), // DynamoDB Local
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local"}, nil
		}),
	})
	if err := idemddb.CreateTable(ctx, client, "idempotency"); err != nil {
		log.Fatal(err)
	}
	s, err := idemddb.New(client, "idempotency")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ready:", s.Table())
}
