package temporaltest

import (
	"bytes"

	commonpb "go.temporal.io/api/common/v1"
	"go.temporal.io/sdk/converter"
	"google.golang.org/protobuf/proto"
)

// XOREncoding is the encoding metadata of the payloads [XORCodec] makes.
const XOREncoding = "binary/idemguard-test-xor"

// XORCodec is a payload codec standing in for encryption: it replaces each
// payload with its protobuf form XORed with a key byte, under its own
// encoding ([XOREncoding]), so no byte of the plaintext survives.
type XORCodec struct{}

// Encode implements converter.PayloadCodec.
func (XORCodec) Encode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		b, err := proto.Marshal(p)
		if err != nil {
			return nil, err
		}
		for j := range b {
			b[j] ^= 0xA5
		}
		out[i] = &commonpb.Payload{Metadata: map[string][]byte{converter.MetadataEncoding: []byte(XOREncoding)}, Data: b}
	}
	return out, nil
}

// Decode implements converter.PayloadCodec; payloads of other encodings
// pass through.
func (XORCodec) Decode(ps []*commonpb.Payload) ([]*commonpb.Payload, error) {
	out := make([]*commonpb.Payload, len(ps))
	for i, p := range ps {
		if string(p.GetMetadata()[converter.MetadataEncoding]) != XOREncoding {
			out[i] = p
			continue
		}
		b := bytes.Clone(p.Data)
		for j := range b {
			b[j] ^= 0xA5
		}
		out[i] = &commonpb.Payload{}
		if err := proto.Unmarshal(b, out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// XORDataConverter is the SDK's default data converter with [XORCodec].
func XORDataConverter() converter.DataConverter {
	return converter.NewCodecDataConverter(converter.GetDefaultDataConverter(), XORCodec{})
}
