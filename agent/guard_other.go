//go:build !linux

package agent

import "time"

// The lease guard reads /proc to find the attempts' processes: elsewhere
// there is none, and agents run without it.
const guardSupported = false

func monoNow() int64 { return time.Now().UnixNano() }

func scanGuarded(guardConfig) []guardTarget { return nil }
