package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idemguard/idemguard/store"
)

// newerFormatHint is what to do about a record written by a newer release
// than the command's.
const newerFormatHint = "the record was written by a newer release of idemguard than this command's: " +
	"use the idemguard command of that release (or later) to read or release it"

// storeErr ends the command with exit status 2 for a failed store request,
// saying what failed and, where the error is one we recognise, what to do.
func (a *app) storeErr(b *backend, what string, err error) error {
	if h := a.hint(b, err); h != "" {
		return &exitErr{code: exitError, err: fmt.Errorf("%s: %w\n  %s", what, err, h)}
	}
	return &exitErr{code: exitError, err: fmt.Errorf("%s: %w", what, err)}
}

// hint says what to do about err, or "".
func (a *app) hint(b *backend, err error) string {
	var (
		notFound *types.ResourceNotFoundException
		api      smithy.APIError
		pgErr    *pgconn.PgError
	)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("the store did not answer within --timeout %v: check the URL and that the server is reachable, or raise --timeout", a.timeout)
	case errors.Is(err, context.Canceled):
		return "interrupted"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing answers at the store's address: check the URL and that the server is running"
	case errors.As(err, &notFound):
		return fmt.Sprintf("%s does not exist: check the table name, region and endpoint, or create it with 'idemguard create-table'", b.desc)
	case errors.As(err, &pgErr) && pgErr.Code == "42P01":
		return fmt.Sprintf("%s does not exist: check ?table=, or create it with 'idemguard create-table'", b.desc)
	case errors.As(err, &pgErr) && (pgErr.Code == "28P01" || pgErr.Code == "28000"):
		return "the server refused the user or password in the URL"
	case errors.As(err, &api) && (api.ErrorCode() == "AccessDeniedException" || api.ErrorCode() == "UnrecognizedClientException"):
		return "the AWS credentials may not do this: docs/dynamodb.md lists the IAM actions each idemguard command needs"
	case strings.Contains(err.Error(), "failed to retrieve credentials") || strings.Contains(err.Error(), "no EC2 IMDS role found"):
		return "no AWS credentials found: set AWS_PROFILE (or ?profile= in the URL), or the AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY variables"
	case strings.Contains(err.Error(), "NOAUTH") || strings.Contains(err.Error(), "WRONGPASS"):
		return "the server refused the user or password in the URL"
	case errors.Is(err, store.ErrNewerFormat):
		return newerFormatHint
	case errors.Is(err, store.ErrCorrupt):
		return "the stored item is not a record idemguard can read; 'idemguard release --force KEY' deletes it"
	case errors.Is(err, store.ErrThrottled):
		return "the store is throttling requests: try again later"
	}
	return ""
}
