module github.com/idemguard/idemguard/tools

go 1.26.0

require (
	golang.org/x/exp v0.0.0-20261014143641-f0251eb4aa3e
	golang.org/x/mod v0.43.0
	golang.org/x/tools v0.52.0
)

require golang.org/x/sync v0.24.0 // indirect
