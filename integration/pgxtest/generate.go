package pgxtest

//go:generate go run github.com/sqlc-dev/sqlc/cmd/sqlc@v1.31.1 generate -f sqlc/sqlc.yaml
