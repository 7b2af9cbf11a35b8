// Package examples holds the checks that span the examples module: that
// every command and Go snippet in the repository's README works as written
// (readme_test.go). The examples themselves are the commands in its
// directories: quickstart, workerpool, payments, httpapi, ledger, consumer,
// wallet and nexus; quickstart and payments share one payment domain,
// internal/payment.
package examples
