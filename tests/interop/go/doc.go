// Package interop runs the stock Go Pulsar client (github.com/apache/pulsar-client-go)
// against this repository's broker. Everything lives in the _test.go files: each test starts
// its own broker process ($BROKER_BIN, with $BROKER_ARGS appended) on 127.0.0.1 and stops it
// when the test ends. See README.md.
package interop
