//go:build windows

package agent

import (
	"errors"
	"io"

	"github.com/hashicorp/go-hclog"
)

// RunGuard: Windows has no lease guard (see guard_run.go).
func RunGuard(io.Reader, hclog.Logger) error {
	return errors.New("the lease guard needs Linux's /proc")
}
