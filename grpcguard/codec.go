package grpcguard

import (
	"encoding/binary"
	"errors"
	"fmt"

	spb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"

	"github.com/idemguard/idemguard/internal/respfmt"
)

// messageCodec stores a response message in respfmt's gRPC format, its
// full name and its wire bytes (proto.Marshal), and replays it by
// unmarshalling into a new message of that type, found in a type registry.
// Keeping the name makes replays independent of how the service was
// registered (generated code, or a handwritten grpc.ServiceDesc).
type messageCodec struct {
	max   int
	types protoregistry.MessageTypeResolver
}

// errTooLarge is the codec's refusal of a response over the bound: the
// guard then records the call without a result.
var errTooLarge = errors.New("grpcguard: response over the bound on stored responses")

func (c messageCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("grpcguard: the response is a %T, not a proto.Message", v)
	}
	name := string(m.ProtoReflect().Descriptor().FullName())
	b := respfmt.AppendMessageName(make([]byte, 0, 2*binary.MaxVarintLen64+len(name)+proto.Size(m)), name)
	start := len(b)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return nil, err
	}
	if len(b)-start > c.max {
		return nil, errTooLarge
	}
	return b, nil
}

func (c messageCodec) Unmarshal(data []byte, v any) error {
	p, ok := v.(*any)
	if !ok {
		return fmt.Errorf("grpcguard: cannot decode into %T", v)
	}
	name, wire, err := respfmt.SplitMessage(data)
	if err != nil {
		return fmt.Errorf("grpcguard: %w", err)
	}
	mt, err := c.types.FindMessageByName(protoreflect.FullName(name))
	if err != nil {
		return fmt.Errorf("grpcguard: the stored response's type %s: %w", name, err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(wire, m); err != nil {
		return err
	}
	*p = m
	return nil
}

// statusCodec stores a handler's error as its google.rpc.Status (code,
// message, details) and replays it as the same status.
type statusCodec struct{}

func (statusCodec) EncodeError(err error) ([]byte, error) {
	return proto.Marshal(status.Convert(err).Proto())
}

func (statusCodec) DecodeError(data []byte) error {
	var st spb.Status
	if err := proto.Unmarshal(data, &st); err != nil {
		return err
	}
	return status.ErrorProto(&st)
}
