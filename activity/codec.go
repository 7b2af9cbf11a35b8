package activity

import (
	"errors"
	"fmt"

	commonpb "go.temporal.io/api/common/v1"
	failurepb "go.temporal.io/api/failure/v1"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"google.golang.org/protobuf/proto"

	"github.com/idemguard/idemguard/guard"
	"github.com/idemguard/idemguard/internal/temporalglue"
)

// PayloadCodec is a [guard.Codec] that stores values as the
// *commonpb.Payloads a Temporal data converter makes of them, in protobuf
// binary form, so that payload codecs (encryption, compression) apply to
// stored results. Its field DataConverter encodes and decodes values (nil
// means the SDK's default). Marshal stores a nil value (an activity that
// returns only an error) as no bytes and a *commonpb.Payloads as it is;
// Unmarshal into a *commonpb.Payloads or **commonpb.Payloads returns the
// stored payloads without decoding them.
//
// Guarded activities use it already; give it to guard.WithCodec to store a
// guard.Do call's result inside an activity as Temporal payloads, or use it
// to decode a stored record's result.
type PayloadCodec = temporalglue.PayloadCodec

// interceptedResult is what an activity guarded by [NewInterceptor]
// returns to the guard: the payloads the worker will send, or, if the
// activity's result could not be encoded, the result itself, which
// interceptorCodec then fails to encode again so that the guard records
// the call without a result rather than let it run twice.
type interceptedResult struct {
	payloads *commonpb.Payloads
	raw      any
}

// interceptorCodec is the codec of calls guarded by [NewInterceptor]: it
// stores an interceptedResult's payloads and replays stored payloads as
// they are into an *interceptedResult. Other values (those of guard.Step
// inside the activity) are encoded and decoded by the PayloadCodec.
type interceptorCodec struct{ PayloadCodec }

func (c interceptorCodec) Marshal(v any) ([]byte, error) {
	r, ok := v.(interceptedResult)
	switch {
	case !ok:
		return c.PayloadCodec.Marshal(v)
	case r.payloads != nil:
		return proto.Marshal(r.payloads)
	}
	return c.PayloadCodec.Marshal(r.raw)
}

func (c interceptorCodec) Unmarshal(data []byte, v any) error {
	r, ok := v.(*interceptedResult)
	if !ok {
		return c.PayloadCodec.Unmarshal(data, v)
	}
	var p *commonpb.Payloads
	if err := c.PayloadCodec.Unmarshal(data, &p); err != nil {
		return err
	}
	*r = interceptedResult{payloads: p}
	return nil
}

// failureCodec is a [guard.ErrorCodec] that stores errors as Temporal
// failures (protobuf binary), so that a replayed application error keeps its
// type, message, details and retryability. Details are encoded with the
// activity's data converter, so payload codecs apply to them.
type failureCodec struct {
	fc converter.FailureConverter
}

func newFailureCodec(dc converter.DataConverter) failureCodec {
	return failureCodec{temporal.NewDefaultFailureConverter(temporal.DefaultFailureConverterOptions{DataConverter: dc})}
}

func (c failureCodec) EncodeError(err error) ([]byte, error) {
	if guard.IsDefinite(err) {
		err = temporalglue.DefiniteError(err)
	}
	return proto.Marshal(c.fc.ErrorToFailure(err))
}

func (c failureCodec) DecodeError(data []byte) error {
	f := &failurepb.Failure{}
	if err := proto.Unmarshal(data, f); err != nil {
		return fmt.Errorf("%w: stored error is not a Temporal failure: %w", guard.ErrResultUnavailable, err)
	}
	return c.fc.FailureToError(f)
}

// isStoredFailure is the definite-error predicate of [WithStoredFailures]:
// errors marked with guard.Definite, and non-retryable application errors.
func isStoredFailure(err error) bool {
	if guard.IsDefinite(err) {
		return true
	}
	var ae *temporal.ApplicationError
	return errors.As(err, &ae) && error(ae) == err && ae.NonRetryable()
}

var (
	_ guard.Codec      = interceptorCodec{}
	_ guard.ErrorCodec = failureCodec{}
)
