module github.com/stockflow/stockflow

go 1.26.0

require (
	github.com/google/uuid v1.6.0
	github.com/redis/go-redis/v9 v9.23.0
)

require (
	github.com/ThreeDotsLabs/watermill v1.5.1 // indirect
	github.com/ThreeDotsLabs/watermill-redisstream v1.4.5 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	go.uber.org/atomic v1.12.0 // indirect
	golang.org/x/sys v0.48.0 // indirect
)
