package httpguard

import (
	"errors"
	"fmt"

	"github.com/idemguard/idemguard/internal/respfmt"
)

// response is a handler's response as stored for replays.
type response struct {
	respfmt.HTTP
	// unstorable: the body passed the bound on stored responses and was
	// streamed to the client; the codec refuses to encode it, so the guard
	// records the call without a result.
	unstorable bool
}

// errTooLarge is the codec's refusal of an unstorable response.
var errTooLarge = errors.New("httpguard: response body over the bound on stored responses")

// codec stores responses in respfmt's HTTP format.
type codec struct{}

// Marshal encodes a *response.
func (codec) Marshal(v any) ([]byte, error) {
	r, ok := v.(*response)
	if !ok || r == nil {
		return nil, fmt.Errorf("httpguard: cannot encode %T", v)
	}
	if r.unstorable {
		return nil, errTooLarge
	}
	return respfmt.AppendHTTP(nil, &r.HTTP), nil
}

// Unmarshal decodes into a **response.
func (codec) Unmarshal(data []byte, v any) error {
	p, ok := v.(**response)
	if !ok {
		return fmt.Errorf("httpguard: cannot decode into %T", v)
	}
	h, err := respfmt.DecodeHTTP(data)
	if err != nil {
		return fmt.Errorf("httpguard: %w", err)
	}
	*p = &response{HTTP: *h}
	return nil
}
