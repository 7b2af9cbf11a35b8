package lambdaguard

// Must returns v, and panics if err is not nil: the panicking form of every
// wrapper, for a function's main, where an invalid option should stop the
// function at its first cold start.
//
//	lambda.Start(lambdaguard.Must(lambdaguard.WrapSQS(g, handle)))
func Must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
