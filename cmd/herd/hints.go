package main

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"

	"herd/api"
	"herd/internal/check"
)

// nextStep says what to do about a failure a user commonly meets, or ""
// when herd has nothing to add to the error itself.
func nextStep(err error) string {
	var (
		dns     *net.DNSError
		unknown x509.UnknownAuthorityError
		status  *api.StatusError
	)
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing answers at that address: start a server (or 'herd dev' to try herd out), or give the HTTP address of any running server with -address or HERD_ADDR"
	case errors.As(err, &dns):
		return "the server's host name does not resolve: check -address or HERD_ADDR"
	case errors.As(err, &unknown), strings.Contains(err.Error(), "certificate signed by unknown authority"):
		return "trust the cluster's CA: give its certificate with -ca-file or HERD_CACERT (herd tls ca create made it)"
	case strings.Contains(err.Error(), "server gave HTTP response to HTTPS client"):
		return "that server speaks plain HTTP: write http:// in the address, or drop -ca-file"
	case strings.Contains(err.Error(), "malformed HTTP response") || strings.Contains(err.Error(), "first record does not look like a TLS handshake"):
		return "that server speaks HTTPS: give the cluster's CA with -ca-file or HERD_CACERT"
	case errors.Is(err, os.ErrDeadlineExceeded), errors.Is(err, context.DeadlineExceeded):
		return "the server did not answer in time: check that it runs and that this machine reaches it (-address, HERD_ADDR)"
	case errors.As(err, &status):
		switch {
		case status.Code == http.StatusUnauthorized:
			return "give an ACL token with -token or HERD_TOKEN ('herd acl token create' makes one)"
		case status.Code == http.StatusForbidden:
			return "the token's policy does not allow this: ask an operator for a token with the capability the message names"
		case status.Code == http.StatusServiceUnavailable && strings.Contains(status.Message, "leader"):
			return "the cluster has no leader yet: one is elected once a quorum of servers runs and reaches each other ('herd operator raft list-peers' shows them); retry in a few seconds"
		}
	}
	return ""
}

// jsonDecodeError describes a JSON file's decoding error, naming the
// nearest known field for an unknown one.
func jsonDecodeError(err error, v any) error {
	quoted, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return err
	}
	return errors.New(check.UnknownField(quoted, v))
}
