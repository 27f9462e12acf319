# syntax=docker/dockerfile:1

FROM golang:1.26-bookworm AS build
WORKDIR /src
ENV CGO_ENABLED=0
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod \
    go mod download
COPY . .
RUN --mount=type=cache,target=/go/pkg/mod \
    --mount=type=cache,target=/root/.cache/go-build \
    go build -trimpath -ldflags "-s -w" -o /leaderboard ./cmd/leaderboard

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /leaderboard /leaderboard
USER nonroot
EXPOSE 8080
ENTRYPOINT ["/leaderboard"]
