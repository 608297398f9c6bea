# The ax binary: every service and the CLI in one image.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/ax ./cmd/ax

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ax /usr/local/bin/ax
ENTRYPOINT ["/usr/local/bin/ax"]
