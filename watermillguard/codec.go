package watermillguard

import (
	"encoding/json"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"
)

// storedMessage is a produced message as the record holds it: what a
// replay needs to publish the same message again.
type storedMessage struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Payload  []byte            `json:"payload,omitempty"`
}

// codec stores a handler's produced messages, []*message.Message, as a JSON
// array of their UUIDs, metadata and payloads (base64), and decodes them
// into fresh messages with the same UUIDs, metadata and payloads.
type codec struct{}

func (codec) Marshal(v any) ([]byte, error) {
	msgs, ok := v.([]*message.Message)
	if !ok {
		return nil, fmt.Errorf("watermillguard: cannot store a %T: the middleware's records hold []*message.Message", v)
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	stored := make([]storedMessage, len(msgs))
	for i, m := range msgs {
		if m == nil {
			return nil, fmt.Errorf("watermillguard: the handler produced a nil message (at %d)", i)
		}
		stored[i] = storedMessage{UUID: m.UUID, Metadata: m.Metadata, Payload: m.Payload}
	}
	return json.Marshal(stored)
}

func (codec) Unmarshal(data []byte, v any) error {
	out, ok := v.(*[]*message.Message)
	if !ok {
		return fmt.Errorf("watermillguard: cannot decode produced messages into a %T", v)
	}
	var stored []storedMessage
	if err := json.Unmarshal(data, &stored); err != nil {
		return err
	}
	msgs := make([]*message.Message, len(stored))
	for i, s := range stored {
		m := message.NewMessage(s.UUID, s.Payload)
		for k, v := range s.Metadata {
			m.Metadata.Set(k, v)
		}
		msgs[i] = m
	}
	*out = msgs
	return nil
}
