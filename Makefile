GO ?= go
STATICCHECK := honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: run test lint bench services browser build up down

## services: bring up local PostgreSQL and Redis when they are not running
services:
	@bash scripts/services.sh

## browser: install Debian's Chromium for the browser test when missing
browser:
	@bash scripts/browser.sh

build:
	$(GO) build -o bin/leaderboard ./cmd/leaderboard

## run: the whole service with defaults (embedded Kafka-protocol broker persisted in .data/)
run: services
	$(GO) run ./cmd/leaderboard

## test: every test, race detector on, against the real PostgreSQL, Redis and broker
test: services browser lint
	LEADERBOARD_REQUIRE_BROWSER=1 $(GO) test -race -count=1 -timeout 12m ./...

## lint: go vet and staticcheck
lint:
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...

## bench: start the service as `make run` does and drive it from cmd/loadgen (writes, reads, SSE fan-out)
bench: services
	bash scripts/bench.sh

## up / down: the compose stack (needs Docker and LEADERBOARD_JWT_SECRET)
up:
	docker compose up -d --build

down:
	docker compose down
