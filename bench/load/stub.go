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
// (ALL_OLD); UpdateItem applies the SET clause of a completion; table
// management requests get canned answers.
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
		id := in.Key["id"]["S"]
		s.mu.Lock()
		defer s.mu.Unlock()
		item, ok := s.items[id]
		if !ok {
			return stubResponse(400, `{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","Message":"The conditional request failed"}`), nil
		}
		set := in.UpdateExpression[strings.Index(in.UpdateExpression, "SET ")+4:]
		for _, a := range strings.Split(strings.TrimSpace(set), ", ") {
			n, v, _ := strings.Cut(a, " = ")
			item[in.ExpressionAttributeNames[n]] = in.ExpressionAttributeValues[v]
		}
		delete(item, "in_progress_expiration")
		return stubResponse(200, `{}`), nil
	case "CreateTable":
		return stubResponse(200, `{"TableDescription":{"TableStatus":"ACTIVE"}}`), nil
	case "DescribeTimeToLive":
		return stubResponse(200, `{"TimeToLiveDescription":{"TimeToLiveStatus":"ENABLED","AttributeName":"expiration"}}`), nil
	}
	return stubResponse(200, `{}`), nil
}

func stubResponse(status int, body string) *http.Response {
	return &http.Response{
		StatusCode:    status,
		Header:        http.Header{"Content-Type": {"application/x-amz-json-1.0"}},
		Body:          io.NopCloser(bytes.NewReader([]byte(body))),
		ContentLength: int64(len(body)),
	}
}
