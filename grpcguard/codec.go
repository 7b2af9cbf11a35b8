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
)

// messageCodec stores a response message as its full name and its wire
// bytes (proto.Marshal), and replays it by unmarshalling into a new message
// of that type, found in a type registry:
//
//	"IGG" 1        magic and version
//	uvarint n      length of the message's full name
//	n bytes        the full name, such as "google.protobuf.StringValue"
//	rest           the message's wire bytes
//
// Keeping the name makes replays independent of how the service was
// registered (generated code, or a handwritten grpc.ServiceDesc).
type messageCodec struct {
	max   int
	types protoregistry.MessageTypeResolver
}

var messageMagic = []byte("IGG\x01")

// errTooLarge is the codec's refusal of a response over the bound: the
// guard then records the call without a result.
var errTooLarge = errors.New("grpcguard: response over the bound on stored responses")

func (c messageCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("grpcguard: the response is a %T, not a proto.Message", v)
	}
	name := m.ProtoReflect().Descriptor().FullName()
	b := make([]byte, 0, len(messageMagic)+binary.MaxVarintLen64+len(name)+proto.Size(m))
	b = append(b, messageMagic...)
	b = binary.AppendUvarint(b, uint64(len(name)))
	b = append(b, name...)
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
	if len(data) < len(messageMagic) || string(data[:len(messageMagic)]) != string(messageMagic) {
		return errors.New("grpcguard: the stored result is not a message stored by grpcguard")
	}
	data = data[len(messageMagic):]
	n, k := binary.Uvarint(data)
	if k <= 0 || n > uint64(len(data)-k) {
		return errors.New("grpcguard: corrupt stored message")
	}
	name := protoreflect.FullName(data[k : k+int(n)])
	mt, err := c.types.FindMessageByName(name)
	if err != nil {
		return fmt.Errorf("grpcguard: the stored response's type %s: %w", name, err)
	}
	m := mt.New().Interface()
	if err := proto.Unmarshal(data[k+int(n):], m); err != nil {
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
