module github.com/idemguard/idemguard

go 1.24.0

require (
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/gowebpki/jcs v1.0.2 // indirect
	github.com/hashicorp/golang-lru/v2 v2.0.7 // indirect
	github.com/jmespath-community/go-jmespath v1.1.1 // indirect
	github.com/jonboulle/clockwork v0.5.0 // indirect
	golang.org/x/exp v0.0.0-20230314191032-db074128a8ec // indirect
)
