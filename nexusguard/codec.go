package nexusguard

import (
	"errors"
	"fmt"
	"net/url"

	"github.com/nexus-rpc/sdk-go/nexus"
	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"

	"github.com/idemguard/idemguard/guard"
)

// The kinds of start a record holds, its first byte.
const (
	kindSync  byte = 's' // the operation completed: its value
	kindAsync byte = 'a' // the operation started: its token
)

// startCodec is the [guard.Codec] of one guarded start. It stores what
// the start returned as a kind byte and two Temporal payloads (protobuf
// binary), both encoded by the call's data converter so that its payload
// codecs apply: the value of a synchronous start, or the token of an
// asynchronous one; then the start's request ID and the links the handler
// attached (a workflow-run operation's link to its workflow). A replay
// decodes the value with decode and hands the links and request ID back
// through st.
type startCodec struct {
	dc     converter.DataConverter
	decode decoder
	st     *startState
}

// decoder decodes the value of a synchronous start: into the operation's
// output type, or, when the interceptor does not know it, into a
// converter.RawValue that the worker sends as it is.
type decoder func(dc converter.DataConverter, p *commonpb.Payload) (any, error)

// startState is what a start and its codec share: the request ID and links
// written with the record, and those read back on a replay.
type startState struct {
	requestID  string       // this start's
	links      []nexus.Link // attached by the handler, or read back
	recordedBy string       // the request ID of the start that recorded, on a replay
}

// startMeta is the second payload of a record.
type startMeta struct {
	RequestID string       `json:"request_id,omitempty"`
	Links     []storedLink `json:"links,omitempty"`
}

type storedLink struct {
	URL  string `json:"url"`
	Type string `json:"type"`
}

func (c startCodec) Marshal(v any) ([]byte, error) {
	kind, first := kindSync, v
	if a, ok := v.(*nexus.HandlerStartOperationResultAsync); ok {
		kind, first = kindAsync, a.OperationToken
	}
	meta := startMeta{RequestID: c.st.requestID}
	for _, l := range c.st.links {
		if l.URL != nil {
			meta.Links = append(meta.Links, storedLink{URL: l.URL.String(), Type: l.Type})
		}
	}
	p, err := c.dc.ToPayloads(first, meta)
	if err != nil {
		return nil, err
	}
	b, err := proto.Marshal(p)
	if err != nil {
		return nil, err
	}
	return append([]byte{kind}, b...), nil
}

func (c startCodec) Unmarshal(data []byte, v any) error {
	out, ok := v.(*any)
	if !ok {
		return fmt.Errorf("idemguard: a Nexus start decodes into an *any, not %T", v)
	}
	if len(data) == 0 {
		return errors.New("idemguard: empty Nexus start record")
	}
	p := &commonpb.Payloads{}
	if err := proto.Unmarshal(data[1:], p); err != nil || len(p.Payloads) != 2 {
		return fmt.Errorf("idemguard: the stored result is not a Nexus start (%v)", err)
	}
	var meta startMeta
	if err := c.dc.FromPayload(p.Payloads[1], &meta); err != nil {
		return err
	}
	c.st.recordedBy, c.st.links = meta.RequestID, nil
	for _, l := range meta.Links {
		u, err := url.Parse(l.URL)
		if err != nil {
			return err
		}
		c.st.links = append(c.st.links, nexus.Link{URL: u, Type: l.Type})
	}
	switch data[0] {
	case kindAsync:
		var token string
		if err := c.dc.FromPayload(p.Payloads[0], &token); err != nil {
			return err
		}
		*out = &nexus.HandlerStartOperationResultAsync{OperationToken: token}
		return nil
	case kindSync:
		val, err := c.decode(c.dc, p.Payloads[0])
		*out = val
		return err
	}
	return fmt.Errorf("idemguard: unknown Nexus start kind %q", data[0])
}

// decodeAs decodes a synchronous start's value into O.
func decodeAs[O any](dc converter.DataConverter, p *commonpb.Payload) (any, error) {
	var o O
	err := dc.FromPayload(p, &o)
	return o, err
}

// decodeRaw decodes a synchronous start's value into a converter.RawValue,
// with dc's payload codec undone: the worker encodes it again with its own
// data converter, as it encodes a value the handler returned.
func decodeRaw(dc converter.DataConverter, p *commonpb.Payload) (any, error) {
	var raw converter.RawValue
	err := dc.FromPayload(p, &raw)
	return raw, err
}

// valueOf returns what a start that returned res records: the value of a
// synchronous result, or the asynchronous result itself.
func valueOf(res any) any {
	switch r := res.(type) {
	case *nexus.HandlerStartOperationResultAsync:
		return r
	case interface{ ValueAsAny() any }:
		return r.ValueAsAny()
	}
	return nil
}

// valueAs returns v, a replayed or shared synchronous value, as an O.
func valueAs[O any](v any) (O, error) {
	var zero O
	if v == nil {
		return zero, nil
	}
	if o, ok := v.(O); ok {
		return o, nil
	}
	return zero, &nexus.HandlerError{
		Type:          nexus.HandlerErrorTypeInternal,
		Message:       fmt.Sprintf("%v: the recorded start holds a %T, not a %T", guard.ErrResultUnavailable, v, zero),
		RetryBehavior: nexus.HandlerErrorRetryBehaviorNonRetryable,
	}
}

var _ guard.Codec = startCodec{}
