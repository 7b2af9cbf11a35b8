// Package lambdaguard makes Go AWS Lambda functions (aws-lambda-go) run
// once per event, as AWS Powertools' idempotency utility does for Python,
// TypeScript, Java and .NET:
//
//   - [Wrap] guards a handler of any signature lambda.Start accepts, keyed
//     by a JMESPath over the event (guard.WithKeyPath, Powertools'
//     event_key_jmespath, powertools_json included), with payload
//     validation, its answer replayed byte for byte;
//   - [WrapSQS], [WrapKinesis] and [WrapDynamoDBStream] guard each record
//     of a batch and answer with the records to redeliver (partial batch
//     responses), in order on FIFO queues and streams;
//   - [WrapAPIGateway], [WrapHTTPAPI] and [WrapFunctionURL] give API
//     Gateway and Function URL requests the Idempotency-Key semantics of
//     package httpguard, by running them through httpguard's middleware.
//
// A function on one DynamoDB table (store/dynamodb, Powertools' layout):
//
//	func main() {
//		cfg, _ := config.LoadDefaultConfig(context.Background())
//		s, _ := idemddb.New(dynamodb.NewFromConfig(cfg), "idempotency")
//		g, _ := guard.New(s)
//		lambda.Start(lambdaguard.Must(lambdaguard.WrapSQS(g, shipOrder,
//			lambdaguard.WithGuardOptions(guard.WithKeyPath("powertools_json(body).order_id")))))
//	}
//
// Each invocation (or record) is one guarded call within the wrapper's
// scope, the function's name by default ([WithScope]). Its claim holds
// for the invocation's remaining time and never past the invocation's
// deadline, also when the guard extends it while the handler runs: when an
// invocation times out and Lambda stops its execution environment, its
// claim lapses at once, and a retry runs the handler again, replaying the
// guard.Step calls that completed. A duplicate while the first invocation
// runs gets [IdempotencyAlreadyInProgressError].
//
// Every wrapper returns an error for an invalid option; [Must] is the
// panicking form. Guard options are given to guard.New (the defaults of
// every call) or to one wrapper with [WithGuardOptions]; they override the
// wrapper's own defaults. The guard's refusals reach the Lambda runtime as
// the error types of this package, named as Powertools names its errors.
// With IDEMGUARD_DISABLED=true every wrapper runs its handler unguarded,
// and guard.Step in it runs its function unguarded.
//
// docs/lambda.md in the repository is the manual, including what a
// function shares with a Powertools function on one table;
// docs/powertools.md maps Powertools' options to these.
package lambdaguard
