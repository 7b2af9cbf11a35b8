package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"sync"
)

// stubDynamo answers the requests of the benchmark in memory, without a
// network (-stub; BenchmarkClient), so that the client's CPU time can be
// measured alone: PutItem
// creates an item or, if one exists, fails its condition returning it
// (ALL_OLD); UpdateItem applies the SET clause of a completion;
// TransactWriteItems applies its Puts and completions; table management
// requests get canned answers.
type stubDynamo struct {
	mu    sync.Mutex
	items map[string]map[string]map[string]string // id -> attribute -> {"S"|"N": value}
}

func newStubDynamo() *stubDynamo {
	return &stubDynamo{items: make(map[string]map[string]map[string]string)}
}

type stubRequest struct {
	Item                      map[string]map[string]string
	Key                       map[string]map[string]string
	UpdateExpression          string
	ExpressionAttributeNames  map[string]string
	ExpressionAttributeValues map[string]map[string]string
	TransactItems             []struct{ Put, Update *stubRequest }
}

// Do implements aws.HTTPClient.
func (s *stubDynamo) Do(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, err
	}
	var in stubRequest
	if err := json.Unmarshal(body, &in); err != nil {
		return stubResponse(400, `{"__type":"com.amazon.coral.validate#ValidationException","message":"bad JSON"}`), nil
	}
	switch strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.") {
	case "PutItem":
		id := in.Item["id"]["S"]
		s.mu.Lock()
		old, ok := s.items[id]
		if !ok {
			s.items[id] = in.Item
		}
		s.mu.Unlock()
		if ok {
			b, _ := json.Marshal(old)
			return stubResponse(400, `{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","Message":"The conditional request failed","Item":`+string(b)+`}`), nil
		}
		return stubResponse(200, `{}`), nil
	case "UpdateItem":
		s.mu.Lock()
		defer s.mu.Unlock()
		if !s.update(&in) {
			return stubResponse(400, `{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","Message":"The conditional request failed"}`), nil
		}
		return stubResponse(200, `{}`), nil
	case "TransactWriteItems":
		// The business Puts and the completion: applied without checking
		// conditions (every key in the benchmark is fresh).
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, a := range in.TransactItems {
			switch {
			case a.Put != nil:
				s.items[a.Put.Item["id"]["S"]] = a.Put.Item
			case a.Update != nil:
				s.update(a.Update)
			}
		}
		return stubResponse(200, `{}`), nil
	case "CreateTable":
		return stubResponse(200, `{"TableDescription":{"TableStatus":"ACTIVE"}}`), nil
	case "DescribeTimeToLive":
		return stubResponse(200, `{"TimeToLiveDescription":{"TimeToLiveStatus":"ENABLED","AttributeName":"expiration"}}`), nil
	}
	return stubResponse(200, `{}`), nil
}

// update applies the SET clause of a completion to its item, and reports
// whether the item exists. s.mu is held.
func (s *stubDynamo) update(in *stubRequest) bool {
	item, ok := s.items[in.Key["id"]["S"]]
	if !ok {
		return false
	}
	set := in.UpdateExpression[strings.Index(in.UpdateExpression, "SET ")+4:]
	for _, a := range strings.Split(strings.TrimSpace(set), ", ") {
		n, v, _ := strings.Cut(a, " = ")
		item[in.ExpressionAttributeNames[n]] = in.ExpressionAttributeValues[v]
	}
	delete(item, "in_progress_expiration")
	return true
}

func stubResponse(status int, body string) *http.Response {
	return &http.Response{
		StatusCode:    status,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(bytes.NewReader([]byte(body))),
		ContentLength: int64(len(body)),
	}
}
