// Package test holds herd's integration tests, fault tests and the
// harness they share: real replicas over loopback TCP with real bbolt
// files, started and stopped in-process.
package test
